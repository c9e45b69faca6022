package cli

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/sluice-go/sluice/cmd/sluice/internal/limits"
	"github.com/sluice-go/sluice/cmd/sluice/internal/serve"
)

// xdsFlags are serve's --xds-… flags: the rules from an xDS server
// (serve.XDSOptions), envoy's CONFIG_TYPE=GRPC_XDS_SOTW.
type xdsFlags struct {
	server, nodeID, nodeMeta, headers string
	tls                               bool
	ca, cert, key, serverName         string
	backoffMin, backoffMax            time.Duration
	forceStart                        bool
}

// xdsFlagNames are the --xds-… flags, for the help's groups.
var xdsFlagNames = []string{"xds-server", "xds-node-id", "xds-node-metadata", "xds-headers", "xds-tls", "xds-tls-ca", "xds-tls-cert", "xds-tls-key",
	"xds-tls-server-name", "xds-backoff-initial", "xds-backoff-max", "xds-max-message-bytes", "xds-force-start"}

// flags declares the --xds-… flags on fs; --xds-max-message-bytes sets
// lt's config-bytes.
func (x *xdsFlags) flags(fs *flag.FlagSet, lt *limits.Table) {
	fs.StringVar(&x.server, "xds-server", "", "take the rules from this xDS server (HOST:PORT), as envoy's CONFIG_TYPE=GRPC_XDS_SOTW does (Envoy Gateway): RateLimitConfig resources, state of the world, instead of --config (envoy's CONFIG_GRPC_XDS_SERVER_URL)")
	fs.StringVar(&x.nodeID, "xds-node-id", "default", "--xds-server: the node id the server keys its snapshots by (envoy's CONFIG_GRPC_XDS_NODE_ID)")
	fs.StringVar(&x.nodeMeta, "xds-node-metadata", "", "--xds-server: the node's metadata, KEY=VALUE,KEY=VALUE (envoy's CONFIG_GRPC_XDS_NODE_METADATA)")
	fs.StringVar(&x.headers, "xds-headers", "", "--xds-server: gRPC metadata sent on the stream, KEY:VALUE,KEY:VALUE (envoy's CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS)")
	fs.BoolVar(&x.tls, "xds-tls", false, "--xds-server: connect with TLS (envoy's CONFIG_GRPC_XDS_SERVER_USE_TLS); the other --xds-tls-… flags imply it")
	fs.StringVar(&x.ca, "xds-tls-ca", "", "--xds-server: PEM CA bundle the server's certificate is checked against (default: the system's; envoy's CONFIG_GRPC_XDS_SERVER_TLS_CACERT)")
	fs.StringVar(&x.cert, "xds-tls-cert", "", "--xds-server: PEM client certificate to present, with --xds-tls-key (envoy's CONFIG_GRPC_XDS_CLIENT_TLS_CERT)")
	fs.StringVar(&x.key, "xds-tls-key", "", "--xds-server: PEM private key of --xds-tls-cert (envoy's CONFIG_GRPC_XDS_CLIENT_TLS_KEY)")
	fs.StringVar(&x.serverName, "xds-tls-server-name", "", "--xds-server: the name the server's certificate must be valid for (default: the host of --xds-server; envoy's CONFIG_GRPC_XDS_SERVER_TLS_SAN)")
	fs.DurationVar(&x.backoffMin, "xds-backoff-initial", 500*time.Millisecond, "--xds-server: the first wait before connecting again after the stream breaks, doubling up to --xds-backoff-max (envoy's XDS_CLIENT_BACKOFF_INITIAL_INTERVAL)")
	fs.DurationVar(&x.backoffMax, "xds-backoff-max", 30*time.Second, "--xds-server: the longest wait before connecting again (envoy's XDS_CLIENT_BACKOFF_MAX_INTERVAL)")
	fs.Var(limitFlag{lt, limits.ConfigBytes}, "xds-max-message-bytes", "the same as --limit config-bytes=`N`: the largest configuration, an xDS response's resources or the rules files together (envoy's XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES)")
	fs.BoolVar(&x.forceStart, "xds-force-start", false, "--xds-server: serve an empty configuration (every descriptor OK) until the server's first arrives, rather than answer UNAVAILABLE (envoy's FORCE_START_WITHOUT_INITIAL_CONFIG)")
}

// options is the serve.XDSOptions the flags ask for, nil without
// --xds-server.
func (x *xdsFlags) options() (*serve.XDSOptions, error) {
	if x.server == "" {
		if x.nodeID != "default" || x.nodeMeta != "" || x.headers != "" || x.tls || x.ca != "" || x.cert != "" || x.key != "" ||
			x.serverName != "" || x.forceStart {
			return nil, errors.New("an --xds-… flag without --xds-server")
		}
		return nil, nil
	}
	o := &serve.XDSOptions{Server: x.server, NodeID: x.nodeID, BackoffMin: x.backoffMin, BackoffMax: x.backoffMax,
		ForceStart: x.forceStart}
	var err error
	if o.NodeMetadata, err = pairs("--xds-node-metadata", x.nodeMeta, "="); err != nil {
		return nil, err
	}
	if o.Headers, err = pairs("--xds-headers", x.headers, ":"); err != nil {
		return nil, err
	}
	if x.backoffMin <= 0 || x.backoffMax < x.backoffMin {
		return nil, fmt.Errorf("--xds-backoff-initial %s, --xds-backoff-max %s: want 0 < initial ≤ max", x.backoffMin, x.backoffMax)
	}
	if o.TLS, err = x.tlsConfig(); err != nil {
		return nil, err
	}
	return o, nil
}

// tlsConfig is the TLS to the xDS server, nil for plain text.
func (x *xdsFlags) tlsConfig() (*tls.Config, error) {
	if !x.tls && x.ca == "" && x.cert == "" && x.key == "" && x.serverName == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: x.serverName}
	if err := clientTLS(cfg, "xds", x.ca, x.cert, x.key); err != nil {
		return nil, err
	}
	return cfg, nil
}

// pairs reads "K<sep>V,K<sep>V" into a map ("" is none).
func pairs(flag, s, sep string) (map[string]string, error) {
	if s == "" {
		return nil, nil
	}
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, sep)
		if !ok || strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("%s %q: want KEY%sVALUE,KEY%sVALUE", flag, s, sep, sep)
		}
		out[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return out, nil
}

// envoyXDS reads envoy's CONFIG_TYPE=GRPC_XDS_SOTW settings into the
// --xds-… flags, envoy's defaults included; with CONFIG_TYPE=FILE (or
// unset) it sets nothing.
func envoyXDS(e *envoyVars, out map[string]string) error {
	switch t := e.get("CONFIG_TYPE", "FILE"); strings.ToUpper(t) {
	case "FILE":
		return nil
	case "GRPC_XDS_SOTW":
	default:
		return fmt.Errorf("envoy environment: CONFIG_TYPE=%s: want FILE or GRPC_XDS_SOTW", t)
	}
	delete(out, "config") // the runtime directory is not read
	out["xds-server"] = e.get("CONFIG_GRPC_XDS_SERVER_URL", "localhost:18000")
	out["xds-node-id"] = e.get("CONFIG_GRPC_XDS_NODE_ID", "default")
	for env, flag := range map[string]string{"CONFIG_GRPC_XDS_NODE_METADATA": "xds-node-metadata", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": "xds-headers",
		"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES": "xds-max-message-bytes"} {
		if v := e.getenv(env); v != "" && v != "0" { // 0: gRPC's default, config-bytes' too
			out[flag] = v
		}
	}
	for _, b := range []struct{ env, def, flag string }{
		{"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "10s", "xds-backoff-initial"},
		{"XDS_CLIENT_BACKOFF_MAX_INTERVAL", "60s", "xds-backoff-max"},
	} {
		v := e.get(b.env, b.def)
		if _, err := time.ParseDuration(v); err != nil {
			return fmt.Errorf("envoy environment: %s=%q is not a duration", b.env, v)
		}
		out[b.flag] = v
	}
	if e.boolean("FORCE_START_WITHOUT_INITIAL_CONFIG") {
		out["xds-force-start"] = "true"
	}
	if e.boolean("CONFIG_GRPC_XDS_SERVER_USE_TLS") {
		out["xds-tls"] = "true"
		for env, flag := range map[string]string{"CONFIG_GRPC_XDS_SERVER_TLS_CACERT": "xds-tls-ca", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT": "xds-tls-cert",
			"CONFIG_GRPC_XDS_CLIENT_TLS_KEY": "xds-tls-key", "CONFIG_GRPC_XDS_SERVER_TLS_SAN": "xds-tls-server-name"} {
			if v := e.getenv(env); v != "" {
				out[flag] = v
			}
		}
	}
	return nil
}
