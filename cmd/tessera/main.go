// Command tessera is Tessera's single binary: every component and every
// operator tool is a subcommand (see package cli). Run `tessera --help`.
package main

import "github.com/tesseradb/tessera/cli"

func main() {
	cli.Main(cli.Options{})
}
