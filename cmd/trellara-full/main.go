// Command trellara-full is the default CLI plus the Kafka transport and the
// Iceberg lake writer, compiled in with the "full" build tag so the default
// binary stays lean.
package main

import (
	"os"

	"github.com/trellara/trellara/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args, os.Stdout, os.Stderr))
}
