package main

import (
	"flag"
	"log/slog"
	"strings"
	"time"

	bootopsd "github.com/bootops/bootops/daemon"
	"github.com/bootops/bootops/power"
	"github.com/bootops/bootops/reconciler"
	"github.com/bootops/bootops/swarm"
)

// serveConfig is what `bootops serve` runs with.
type serveConfig struct {
	source, ref, site, httpAddr, dhcp, iface, ipxeDir, stateDir, tftpAddr, artifactMode, logFormat, logLevel string
	gitUser, gitPasswordFile, gitSSHKey, gitKnownHosts, gitCAFile                                            string
	webhookSecretFile, verifyCommits, configFile, uiTokenFile, operatorsFile                                 string
	httpsAddr, tlsCert, tlsKey, overlayKey, shim, grub, shimARM64, grubARM64                                 string
	secretsDir, ageIdentity, bmcAllow                                                                        string
	hubURLs, hubSeed, hubCA, pprofAddr, swarmAddr                                                            string
	peerName, peerListen, peers, peerCert, peerKey, peerCA                                                   string
	swarmStreams                                                                                             int
	limits                                                                                                   limits
	interval, drainTimeout, powerInterval, bmcTimeout                                                        time.Duration
	allowEmpty, bmcInsecureTLS, openReads                                                                    bool
	compileTimeout                                                                                           time.Duration
	compileMemory                                                                                            byteSize
}

// serveConfig reads the flags, BOOTOPS_* variables and the config file;
// SIGHUP calls it again.
func (c *command) serveConfig(e *env, args []string) (serveConfig, error) {
	fs := c.flags(e)
	var cfg serveConfig
	cfg.gitFlags(fs)
	cfg.bootFlags(fs)
	cfg.powerFlags(fs)
	cfg.runFlags(fs)
	if err := parseNone(fs, e, args); err != nil {
		return cfg, err
	}
	if cfg.configFile != "" {
		if err := applyConfigFile(fs, cfg.configFile); err != nil {
			return cfg, err
		}
	}
	return cfg, cfg.check()
}

// check refuses settings that cannot work together.
func (cfg serveConfig) check() error {
	if cfg.source == "" {
		return usagef("--source is required")
	}
	if cfg.artifactMode != "serve" && cfg.artifactMode != "redirect" {
		return usagef("--artifact-mode %q: want serve or redirect", cfg.artifactMode)
	}
	if _, err := parseLevel(cfg.logLevel); err != nil {
		return err
	}
	if cfg.hubURLs != "" {
		switch {
		case len(cfg.sites()) != 1:
			return usagef("--hub: name the one site this daemon reports as with --site S (a hub credential is one site's)")
		case cfg.hubSeed == "" || cfg.hubCA == "":
			return usagef("--hub needs --hub-seed (the site's key, from bootops hub add-site) and --hub-ca (the hub's CA): sites reach the hub over TLS only")
		}
	}
	if (cfg.peerListen == "") != (cfg.peers == "") {
		return usagef("--peer-listen and --peers go together: this daemon's cluster address and the others' (a site of two or three daemons)")
	}
	if n := len(splitList(cfg.peers)); n > 2 {
		return usagef("--peers: %d other daemons; a site's cluster has two or three members", n)
	}
	if err := cfg.limits.check(); err != nil {
		return err
	}
	if _, err := power.ParseAllowList(cfg.bmcAllow); err != nil {
		return usagef("--bmc-allow: %v", err)
	}
	if cfg.compileTimeout <= 0 || cfg.compileMemory < 64<<20 {
		return usagef("--compile-timeout: more than 0; --compile-memory: at least 64MiB")
	}
	if cfg.powerInterval < time.Second || cfg.bmcTimeout < time.Second {
		return usagef("--power-interval and --bmc-timeout: at least 1s")
	}
	return nil
}

// gitFlags: what to follow and how to reach it.
func (cfg *serveConfig) gitFlags(fs *flag.FlagSet) {
	fs.StringVar(&cfg.source, "source", "", "Git URL (https://, ssh://, user@host:path, git://, file://) or repository folder to serve (required)")
	fs.StringVar(&cfg.ref, "ref", "", "Git branch, tag or commit to follow (default: the remote's default branch)")
	fs.DurationVar(&cfg.interval, "interval", 30*time.Second, "how often to look at the Git remote (±10% jitter); a webhook looks at once")
	fs.StringVar(&cfg.gitUser, "git-username", "", "https user name (default \"git\" when a password is given)")
	fs.StringVar(&cfg.gitPasswordFile, "git-password-file", "", "file holding the https password or access token")
	fs.StringVar(&cfg.gitSSHKey, "git-ssh-key", "", "ssh private key file (ssh:// and user@host:path URLs)")
	fs.StringVar(&cfg.gitKnownHosts, "git-known-hosts", "", "known_hosts file with the ssh server's key (default ~/.ssh/known_hosts)")
	fs.StringVar(&cfg.gitCAFile, "git-ca-file", "", "PEM file of CA certificates the https server's certificate may chain to")
	fs.StringVar(&cfg.webhookSecretFile, "webhook-secret-file", "", "file holding the shared secret of POST /hooks/git (GitHub, GitLab, Gitea/Forgejo, generic HMAC)")
	fs.StringVar(&cfg.verifyCommits, "verify-commits", "", "armored OpenPGP public keys: serve only commits signed by one of them")
	fs.DurationVar(&cfg.compileTimeout, "compile-timeout", reconciler.DefaultCompileTimeout, "a revision whose CUE takes longer to evaluate is refused (a child process, killed at the deadline)")
	cfg.compileMemory = reconciler.DefaultCompileMemory
	fs.Var(&cfg.compileMemory, "compile-memory", "a revision whose CUE needs more memory to evaluate is refused (e.g. 2GiB, 512MiB)")
	fs.BoolVar(&cfg.allowEmpty, "allow-empty", false, "serve a revision with no site, or one that removes every node")
}

// bootFlags: the boot plane: which sites, its listeners and files.
func (cfg *serveConfig) bootFlags(fs *flag.FlagSet) {
	fs.StringVar(&cfg.site, "site", "", "sites this daemon serves, comma-separated (default: every site; DHCP runs for each on its network.interface)")
	fs.StringVar(&cfg.httpAddr, "http-addr", ":8080", "HTTP listen addresses, comma-separated (\":8080\" is both families; \"198.18.0.1:8080,[2001:db8::1]:8080\" two)")
	fs.StringVar(&cfg.httpsAddr, "https-addr", "", "HTTPS listen addresses, comma-separated, for the agents of sites with network.httpsPort (e.g. :8443); its certificate: --tls-cert")
	fs.StringVar(&cfg.tlsCert, "tls-cert", "", "PEM certificate chain of the HTTPS listener (default <state-dir>/tls/server.pem, from bootops ca init)")
	fs.StringVar(&cfg.tlsKey, "tls-key", "", "its private key, mode 0600 (default <state-dir>/tls/server-key.pem)")
	fs.StringVar(&cfg.overlayKey, "overlay-key", "", "ed25519 key that signs the site overlays (default <state-dir>/tls/overlay.key when it exists)")
	fs.StringVar(&cfg.shim, "shim", "/usr/lib/shim/shimx64.efi.signed", "Debian's signed shim, served as shimx64.efi for the shim chain (package shim-signed)")
	fs.StringVar(&cfg.grub, "grub", "/usr/lib/grub/x86_64-efi-signed/grubnetx64.efi.signed", "Debian's signed network GRUB, served as grubx64.efi (package grub-efi-amd64-signed)")
	fs.StringVar(&cfg.shimARM64, "shim-arm64", "/usr/lib/shim/shimaa64.efi.signed", "Debian's signed shim for 64-bit ARM, served as shimaa64.efi (package shim-signed:arm64; docs/arm64.md)")
	fs.StringVar(&cfg.grubARM64, "grub-arm64", "/usr/lib/grub/arm64-efi-signed/grubnetaa64.efi.signed", "Debian's signed network GRUB for 64-bit ARM, served as grubaa64.efi (package grub-efi-arm64-signed:arm64)")
	fs.StringVar(&cfg.dhcp, "dhcp", "", "DHCP mode: proxy, reservation or off (default: the site's network.dhcp)")
	fs.StringVar(&cfg.iface, "interface", "", "network interface of the provisioning LAN (default: the site's network.interface)")
	fs.StringVar(&cfg.ipxeDir, "ipxe-dir", "/usr/lib/ipxe", "folder with the iPXE binaries served over TFTP")
	fs.StringVar(&cfg.tftpAddr, "tftp-addr", ":69", "TFTP listen addresses, comma-separated: \":69\" is IPv4, add \"[::]:69\" for IPv6 (\"\" for none)")
	fs.StringVar(&cfg.artifactMode, "artifact-mode", "serve", "Micro-OS files from a URL: serve (fetch, verify, cache) or redirect (send machines to the URL)")
	fs.StringVar(&cfg.uiTokenFile, "ui-token-file", "", "file holding one operator token with the operate role (the dashboard's fetch now, power actions)")
	fs.StringVar(&cfg.operatorsFile, "operators-file", "", "file of operator tokens, 'ROLE TOKEN [NAME]' a line, ROLE read or operate (re-read on SIGHUP); serve also makes <state-dir>/operator-token (operate)")
	fs.BoolVar(&cfg.openReads, "open-reads", false, "let anyone read the status, timelines, inventory and delivery record without a credential: a closed lab only (logged)")
	fs.StringVar(&cfg.swarmAddr, "swarm-addr", "", "serve image chunks to sites with imageDelivery: peers on a listener of their own (default: on --http-addr); its port is the same on every site's server address")
	fs.IntVar(&cfg.swarmStreams, "swarm-streams", swarm.DefaultServerStreams, "chunk transfers the server makes at once per image to machines fetching with their peers: enough to fill its link")
	addLimitFlags(fs, &cfg.limits)
}

// powerFlags: out-of-band power: BMC credentials and where they may go.
func (cfg *serveConfig) powerFlags(fs *flag.FlagSet) {
	fs.StringVar(&cfg.secretsDir, "secrets-dir", "", "folder of BMC credentials: one file per bmc.credentials.secret, \"username:password\", then \"allow: NETWORK|ADDRESS|HOST[, …]\" lines naming the BMCs it may be sent to; mode 0600")
	fs.StringVar(&cfg.ageIdentity, "age-identity", "", "age identity file (age-keygen) that decrypts bmc.credentials.age values, mode 0600")
	fs.StringVar(&cfg.bmcAllow, "bmc-allow", "", "BMC networks, addresses or host names (comma-separated) that age credentials, and secret files without allow: lines, may be sent to; none: refused (Git names a BMC's address, the daemon where its password may go)")
	fs.BoolVar(&cfg.bmcInsecureTLS, "bmc-insecure-tls-allowed", false, "obey bmc.tlsVerify: false in Git (Redfish BMCs whose certificate is not checked); without it such a BMC is refused")
	fs.DurationVar(&cfg.powerInterval, "power-interval", power.DefaultInterval, "how often to ask every BMC its power state (20 at once)")
	fs.DurationVar(&cfg.bmcTimeout, "bmc-timeout", power.DefaultTimeout, "how long one BMC call may take before it counts as unreachable")
}

// runFlags: the process: state, logs, the hub, shutdown.
func (cfg *serveConfig) runFlags(fs *flag.FlagSet) {
	fs.StringVar(&cfg.stateDir, "state-dir", "/var/lib/bootops", "folder for the last good plan, the secret that signs the agents' credentials, DHCP leases and the artifact cache")
	fs.StringVar(&cfg.logFormat, "log-format", "json", "log format: json or text")
	fs.StringVar(&cfg.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&cfg.hubURLs, "hub", "", "report this site's events to a hub (bootops hub): its NATS URLs, comma-separated (nats://hub1:4222,…); needs --site S, --hub-seed and --hub-ca")
	fs.StringVar(&cfg.hubSeed, "hub-seed", "", "the site's nkey seed file from bootops hub add-site (mode 0600)")
	fs.StringVar(&cfg.hubCA, "hub-ca", "", "PEM CA certificate(s) the hub's TLS certificate chains to")
	fs.StringVar(&cfg.peerListen, "peer-listen", "", "a site with more than one server: this daemon's cluster address (host:port) the others' --peers name; with --peers it joins them (docs/cluster.md)")
	fs.StringVar(&cfg.peers, "peers", "", "the site's other daemons' cluster addresses, comma-separated (host:port,…)")
	fs.StringVar(&cfg.peerName, "peer-name", "", "this daemon's name in the site's cluster, unique (default: the host name)")
	fs.StringVar(&cfg.peerCert, "peer-cert", "", "its peer certificate, from bootops ca peer (default <state-dir>/tls/peer.pem)")
	fs.StringVar(&cfg.peerKey, "peer-key", "", "its key, mode 0600 (default <state-dir>/tls/peer-key.pem)")
	fs.StringVar(&cfg.peerCA, "peer-ca", "", "the site CA that signed every member's peer certificate (default <state-dir>/tls/ca.pem)")
	fs.StringVar(&cfg.pprofAddr, "pprof-addr", "", "debugging: serve Go's profiles (/debug/pprof/) on this address; keep it on loopback")
	fs.DurationVar(&cfg.drainTimeout, "drain-timeout", 30*time.Second, "on SIGTERM, how long transfers in flight may finish")
	fs.StringVar(&cfg.configFile, "config", "", "YAML file of settings (flag-name: value); flags and BOOTOPS_* variables win over it")
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return l, usagef("--log-level %q: want debug, info, warn or error", s)
	}
	return l, nil
}

// splitList is a comma-separated list without its blanks.
func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

func (cfg serveConfig) sites() []string {
	var out []string
	for _, s := range strings.Split(cfg.site, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// readSecret reads a one-line secret file ("" name: none).
func readSecret(name, what string) (string, error) { return bootopsd.ReadSecret(name, what) }
