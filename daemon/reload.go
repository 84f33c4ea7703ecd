package daemon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	bhttp "github.com/bootops/bootops/boot/http"
	"github.com/bootops/bootops/reconciler"
)

// ConfigError is a setting's mistake found as the daemon starts (a bad
// keyring, secret file or BMC allow list): the command line's fault.
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

func configErr(err error) error { return &ConfigError{err} }

func configErrf(format string, args ...any) error { return &ConfigError{fmt.Errorf(format, args...)} }

// ReadSecret reads a one-line secret file ("" name: none).
func ReadSecret(name, what string) (string, error) {
	if name == "" {
		return "", nil
	}
	b, err := os.ReadFile(name)
	if err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "", fmt.Errorf("%s: %s is empty", what, name)
	}
	return s, nil
}

// reloadable is what SIGHUP changes without a restart.
type reloadable struct {
	interval      time.Duration
	keyring       string
	webhookSecret []byte
	uiToken       string
	operators     *bhttp.Operators
	level         slog.Level
}

func (cfg Config) reloadable() (reloadable, error) {
	var r reloadable
	var err error
	r.interval = cfg.Source.Interval
	r.level = cfg.LogLevel
	if r.keyring, err = ReadSecret(cfg.Source.VerifyCommits, "--verify-commits"); err != nil {
		return r, err
	}
	if r.keyring != "" {
		if err := reconciler.CheckKeyring(r.keyring); err != nil {
			return r, fmt.Errorf("--verify-commits %s: %w", cfg.Source.VerifyCommits, err)
		}
	}
	secret, err := ReadSecret(cfg.Source.WebhookSecretFile, "--webhook-secret-file")
	if err != nil {
		return r, err
	}
	if secret != "" {
		r.webhookSecret = []byte(secret)
	}
	if r.uiToken, err = ReadSecret(cfg.Dashboard.TokenFile, "--ui-token-file"); err != nil {
		return r, err
	}
	if r.operators, err = cfg.operators(r.uiToken); err != nil {
		return r, err
	}
	return r, nil
}

// OperatorTokenFile is the operator token the daemon makes for itself in
// its state folder (operate role): what the CLI on the same machine, and
// the demo, present.
const OperatorTokenFile = "operator-token"

// operators are the operators' tokens: --operators-file's, the dashboard
// token (operate) and the state folder's operator token (operate), made
// on first start.
func (cfg Config) operators(uiToken string) (*bhttp.Operators, error) {
	ops := &bhttp.Operators{}
	if f := cfg.Dashboard.OperatorsFile; f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("--operators-file: %w", err)
		}
		if ops, err = bhttp.ParseOperators(f, string(b)); err != nil {
			return nil, fmt.Errorf("--operators-file: %w", err)
		}
	}
	ops.Add("--ui-token-file", uiToken, bhttp.RoleOperate)
	if cfg.StateDir != "" {
		tok, err := stateToken(filepath.Join(cfg.StateDir, OperatorTokenFile))
		if err != nil {
			return nil, err
		}
		ops.Add("state folder's "+OperatorTokenFile, tok, bhttp.RoleOperate)
	}
	return ops, nil
}

// stateToken reads a token file of the state folder, making it (24
// random bytes in hex, mode 0600) when it does not exist.
func stateToken(path string) (string, error) {
	if b, err := os.ReadFile(path); err == nil {
		if tok := strings.TrimSpace(string(b)); len(tok) >= bhttp.MinTokenLen {
			return tok, nil
		}
		return "", fmt.Errorf("%s: shorter than %d characters: remove it for a new one", path, bhttp.MinTokenLen)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", err
	}
	b := make([]byte, 24)
	rand.Read(b)
	tok := hex.EncodeToString(b)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", err
	}
	if _, err := f.WriteString(tok + "\n"); err != nil {
		f.Close()
		return "", err
	}
	return tok, f.Close()
}

// reloadOnHUP re-reads the settings on SIGHUP: the poll interval, the
// keyring, the webhook secret and the log level change at once; the others
// need a restart, and the log says which.
func reloadOnHUP(ctx context.Context, log *slog.Logger, cfg Config, level *slog.LevelVar, settings *atomic.Pointer[reloadable], f *reconciler.Follower) error {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-hup:
		}
		if cfg.Reload == nil {
			continue
		}
		next, err := cfg.Reload()
		if err == nil {
			var r reloadable
			if r, err = next.reloadable(); err == nil {
				settings.Store(&r)
				level.Set(r.level)
				if f != nil {
					f.Configure(r.interval, r.keyring)
				}
				if restart := restartNeeded(cfg, next); len(restart) > 0 {
					log.Warn("reload: these settings change only with a restart", "settings", restart)
				}
				log.Info("reload: settings re-read", "interval", r.interval.String(), "verify_commits", r.keyring != "", "webhook_secret", r.webhookSecret != nil, "ui_token", r.uiToken != "", "operators", r.operators.Len(), "log_level", r.level.String())
				continue
			}
		}
		log.Error("reload: settings not changed", "err", err)
	}
}

// restartNeeded names the flags whose change only a restart applies.
func restartNeeded(a, b Config) []string {
	var out []string
	s, t := a.Source, b.Source
	for name, same := range map[string]bool{
		"source": s.Source == t.Source, "ref": s.Ref == t.Ref, "site": slices.Equal(s.Sites, t.Sites), "http-addr": a.HTTP.Addr == b.HTTP.Addr,
		"dhcp": a.DHCP.Mode == b.DHCP.Mode, "interface": a.DHCP.Interface == b.DHCP.Interface, "tftp-addr": a.TFTP.Addr == b.TFTP.Addr, "state-dir": a.StateDir == b.StateDir,
		"ipxe-dir": a.TFTP.IPXEDir == b.TFTP.IPXEDir, "allow-empty": s.AllowEmpty == t.AllowEmpty, "artifact-mode": a.HTTP.ArtifactMode == b.HTTP.ArtifactMode,
		"git-username": s.GitUser == t.GitUser, "git-password-file": s.GitPasswordFile == t.GitPasswordFile, "git-ssh-key": s.GitSSHKey == t.GitSSHKey,
		"https-addr": a.HTTP.HTTPSAddr == b.HTTP.HTTPSAddr, "swarm-addr": a.Swarm.Addr == b.Swarm.Addr, "swarm-streams": a.Swarm.Streams == b.Swarm.Streams,
		"tls-cert": a.HTTP.TLSCert == b.HTTP.TLSCert, "tls-key": a.HTTP.TLSKey == b.HTTP.TLSKey, "overlay-key": a.HTTP.OverlayKey == b.HTTP.OverlayKey,
		"open-reads": a.Dashboard.OpenReads == b.Dashboard.OpenReads, "compile-timeout": s.CompileTimeout == t.CompileTimeout, "compile-memory": s.CompileMemory == t.CompileMemory, "shim": a.TFTP.Shim == b.TFTP.Shim, "grub": a.TFTP.GRUB == b.TFTP.GRUB,
	} {
		if !same {
			out = append(out, name)
		}
	}
	return out
}
