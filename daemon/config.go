package daemon

import (
	"io"
	"log/slog"
	"time"

	"github.com/bootops/bootops/boot"
	bhttp "github.com/bootops/bootops/boot/http"
	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/hub"
	"github.com/bootops/bootops/reconciler"
)

// Config is what the daemon runs with: one part per plane.
type Config struct {
	Log      *slog.Logger   // nil: discard
	Level    *slog.LevelVar // the logger's level, set from LogLevel and on SIGHUP
	LogLevel slog.Level
	Stderr   io.Writer // where a folder that does not compile at start is explained
	StateDir string    // the last good plan, the agents' secret, leases, the artifact cache
	// DrainTimeout is how long transfers in flight (HTTP, TFTP) may finish
	// once the daemon stops.
	DrainTimeout time.Duration

	Source    SourceConfig
	Status    StatusConfig
	HTTP      HTTPConfig
	DHCP      DHCPConfig
	TFTP      TFTPConfig
	Power     PowerConfig
	Swarm     SwarmConfig
	Dashboard DashboardConfig
	Hub       HubConfig
	Cluster   ClusterConfig

	// Reload reads the settings again on SIGHUP (nil: SIGHUP changes
	// nothing).
	Reload func() (Config, error)
}

// SourceConfig is the reconciler's: what it follows and how it compiles.
type SourceConfig struct {
	Source            string        // Git URL or repository folder
	Ref               string        // Git branch, tag or commit ("": the remote's default)
	Interval          time.Duration // how often to look at the remote
	Sites             []string      // the sites served (none: every site)
	AllowEmpty        bool
	GitUser           string
	GitPasswordFile   string
	GitSSHKey         string
	GitKnownHosts     string
	GitCAFile         string
	VerifyCommits     string // armored keyring file
	WebhookSecretFile string
	CompileTimeout    time.Duration
	CompileMemory     int64
	Worker            []string // the command that evaluates a revision's CUE in a child process
}

// StatusConfig bounds the status store.
type StatusConfig struct {
	UnknownMax int           // machines that are no node kept
	UnknownMB  int           // MiB of their events kept
	NodeGrace  time.Duration // how long a node removed from Git keeps its status
	NodeBurst  int           // boot-plane events one node's timeline takes at once…
	NodeEvery  time.Duration // …then one per this long
}

// HTTPConfig is the HTTP and HTTPS listeners', with what bounds the LAN's
// traffic on them.
type HTTPConfig struct {
	Addr         string
	HTTPSAddr    string
	TLSCert      string // default <state-dir>/tls/server.pem
	TLSKey       string // default <state-dir>/tls/server-key.pem
	OverlayKey   string // default <state-dir>/tls/overlay.key when it exists
	ArtifactMode string // serve or redirect
	PprofAddr    string
	MaxConns     int // 0: half the open-files limit
	PerSource    int
	NewBurst     int           // machines new to the daemon one address may introduce at once…
	NewEvery     time.Duration // …then one per this long
}

// DHCPConfig overrides the sites' network settings.
type DHCPConfig struct {
	Mode      string // proxy, reservation or off ("": the site's network.dhcp)
	Interface string // "": the site's network.interface
}

// TFTPConfig is the TFTP listener's and the boot files it serves (over
// HTTP too).
type TFTPConfig struct {
	Addr    string // "": none
	IPXEDir string
	Shim    string
	GRUB    string
	// ShimARM64 and GRUBARM64: the shim chain's first stages for 64-bit
	// ARM machines (Debian's arm64 shim-signed and grub-efi-arm64-signed).
	ShimARM64 string
	GRUBARM64 string
}

// PowerConfig is the BMCs': their credentials and how they are asked.
type PowerConfig struct {
	SecretsDir  string
	AgeIdentity string
	BMCAllow    string
	InsecureTLS bool
	Interval    time.Duration
	Timeout     time.Duration
}

// SwarmConfig is the machines' fetching of images from each other.
type SwarmConfig struct {
	Addr    string // a listener of its own ("": on the HTTP listener)
	Streams int
}

// DashboardConfig is the dashboard's.
type DashboardConfig struct {
	TokenFile string // a token with the operate role ("": none)
	// OperatorsFile holds the operators' tokens, "ROLE TOKEN [NAME]" a
	// line (bhttp.ParseOperators); re-read on SIGHUP.
	OperatorsFile string
	// OpenReads lets anyone read the status, timelines and delivery
	// record: for a closed lab only (logged at start).
	OpenReads bool
}

// HubConfig reports the site's events to a hub. Forwarder, when set, is
// called once the store and reconciler exist; the store then keeps an
// outbox for it.
// ClusterConfig makes the daemon one member of a site of two or three
// (sitecluster): Listen empty, it is the site's one daemon.
type ClusterConfig struct {
	Name   string   // the member's name, unique in the site (default: the host name)
	Listen string   // its cluster address, host:port
	Peers  []string // the other members' cluster addresses
	// CertFile, KeyFile: its peer certificate (bootops ca peer); CAFile
	// the site CA that signed every member's (defaults under
	// <state-dir>/tls: peer.pem, peer-key.pem, ca.pem).
	CertFile, KeyFile, CAFile string
}

type HubConfig struct {
	Forwarder func(plans *boot.Live, rec *reconciler.Reconciler, events *status.Durable, rollouts func() []bhttp.RolloutStatus, cluster func() *bhttp.ClusterStatus) (*hub.Forwarder, error)
}
