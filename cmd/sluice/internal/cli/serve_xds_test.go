package cli

import (
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice/cmd/sluice/internal/limits"
	"github.com/sluice-go/sluice/cmd/sluice/internal/serve"
)

// Envoy Gateway's environment, through --envoy-env, becomes the
// serve.XDSOptions it stands for; a flag on the command line wins.
func TestEnvoyEnvXDSOptions(t *testing.T) {
	env := map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": "gateway:18001", "CONFIG_GRPC_XDS_NODE_ID": "rl",
		"CONFIG_GRPC_XDS_NODE_METADATA": "zone=a", "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "2s", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "127.0.0.1:1"}
	var f serveFlags
	fs := f.define()
	if err := fs.Parse([]string{"--xds-node-id", "mine"}); err != nil {
		t.Fatal(err)
	}
	if err := applyEnvoyEnv(fs, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	o, done, err := f.options(io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	want := &serve.XDSOptions{Server: "gateway:18001", NodeID: "mine", NodeMetadata: map[string]string{"zone": "a"},
		BackoffMin: 2 * time.Second, BackoffMax: time.Minute}
	if o.Config != "" || !reflect.DeepEqual(o.XDS, want) {
		t.Fatalf("config %q, xDS %+v\nwant %+v", o.Config, o.XDS, want)
	}
}

// The --xds-… flags' mistakes are named.
func TestXDSFlagErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--xds-server", "x:1", "--xds-node-metadata", "zone"}, "--xds-node-metadata \"zone\": want KEY=VALUE"},
		{[]string{"--xds-server", "x:1", "--xds-headers", "a=b"}, "--xds-headers \"a=b\": want KEY:VALUE"},
		{[]string{"--xds-server", "x:1", "--xds-tls-cert", "c.pem"}, "--xds-tls-cert and --xds-tls-key go together"},
		{[]string{"--xds-server", "x:1", "--xds-tls-ca", "/nonexistent/ca.pem"}, "--xds-tls-ca"},
		{[]string{"--xds-server", "x:1", "--xds-backoff-initial", "2s", "--xds-backoff-max", "1s"}, "want 0 < initial ≤ max"},
		{[]string{"--near-limit-ratio", "0"}, "--near-limit-ratio 0: want more than 0"},
		{[]string{"--xds-tls"}, "an --xds-… flag without --xds-server"},
	} {
		var f serveFlags
		fs := f.define()
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		if _, _, err := f.options(io.Discard); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error with %q", c.args, err, c.want)
		}
	}
}

// --xds-max-message-bytes, and envoy's XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES
// through it, set the limit config-bytes (0 in envoy's environment: the
// default); a value that is not a size is refused as --limit's is.
func TestXDSMaxMessageBytes(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  string
		want int64
	}{
		{[]string{"--xds-server", "x:1", "--xds-max-message-bytes", "8MiB"}, "", 8 << 20},
		{[]string{"--xds-max-message-bytes", "100000"}, "", 100000}, // files too: no --xds-server needed
		{[]string{"--envoy-env"}, "8388608", 8 << 20},
		{[]string{"--envoy-env"}, "0", limits.ConfigBytes.Default},
		{[]string{"--envoy-env", "--limit", "config-bytes=1MiB"}, "8388608", 1 << 20},
	} {
		env := map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES": c.env}
		var f serveFlags
		fs := f.define()
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		if f.envoyEnv {
			if err := applyEnvoyEnv(fs, func(k string) string { return env[k] }); err != nil {
				t.Fatal(err)
			}
		}
		o, done, err := f.options(io.Discard)
		if err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		done()
		if o.Limits.ConfigBytes != c.want {
			t.Errorf("%v, XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES=%q: config-bytes %d, want %d", c.args, c.env, o.Limits.ConfigBytes, c.want)
		}
	}
	var f serveFlags
	if err := f.define().Parse([]string{"--xds-max-message-bytes", "-1"}); err == nil || !strings.Contains(err.Error(), "limit config-bytes") {
		t.Errorf("--xds-max-message-bytes -1: %v, want --limit's error", err)
	}
}
