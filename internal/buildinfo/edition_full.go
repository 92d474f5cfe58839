//go:build full

package buildinfo

func init() { Edition = "full" }
