package verify

// ShellQuote makes s safe to paste into a POSIX shell as one word: the
// quoting verify's own recovery commands use, for the commands other
// reports print beside them (repair-plan's verify --table).
func ShellQuote(s string) string { return shellQuote(s) }
