// Command trellara is the default Trellara CLI.
package main

import (
	"os"

	"github.com/trellara/trellara/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args, os.Stdout, os.Stderr))
}
