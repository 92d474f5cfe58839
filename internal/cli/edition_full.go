//go:build full

package cli

func init() { Edition = "full" }
