// terraform-provider-berth: Berth's dedicated GPU endpoints and API keys as Terraform resources.
// Built with `go build`; Terraform finds it through a dev_overrides CLI configuration (see README.md)
// or, once published, through a registry under the address below.
package main

import (
	"context"
	"flag"
	"log"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"

	"berth.dev/terraform-provider-berth/internal/provider"
)

// version is set at build time with -ldflags="-X main.version=…".
var version = "dev"

func main() {
	debug := flag.Bool("debug", false, "run with support for debuggers such as delve")
	flag.Parse()
	err := providerserver.Serve(context.Background(), provider.New(version), providerserver.ServeOpts{
		Address: provider.Address,
		Debug:   *debug,
	})
	if err != nil {
		log.Fatal(err)
	}
}
