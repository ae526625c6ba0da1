package cli

import (
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/tesseradb/tessera/tlsfiles"
)

// tlsClientFlags registers the files of one hop's client TLS:
// --<hop>-ca, --<hop>-cert, --<hop>-key and --<hop>-server-name, each
// also read from TESSERA_<HOP>_CA and so on. Naming any file turns TLS on
// for that hop; a peer that does not present a certificate the CA signed
// is refused.
func tlsClientFlags(fl *pflag.FlagSet, hop, peer string, c *tlsfiles.Client) {
	env := "TESSERA_" + strings.ToUpper(hop) + "_"
	fl.StringVar(&c.CA, hop+"-ca", os.Getenv(env+"CA"),
		"CA certificate file that verifies "+peer+": TLS to "+peer+" (env "+env+"CA)")
	fl.StringVar(&c.Cert, hop+"-cert", os.Getenv(env+"CERT"),
		"client certificate file presented to "+peer+" (with --"+hop+"-key; env "+env+"CERT)")
	fl.StringVar(&c.Key, hop+"-key", os.Getenv(env+"KEY"),
		"key file of --"+hop+"-cert (env "+env+"KEY)")
	fl.StringVar(&c.ServerName, hop+"-server-name", os.Getenv(env+"SERVER_NAME"),
		"name "+peer+"'s certificate must hold, when not the host dialed (env "+env+"SERVER_NAME)")
}
