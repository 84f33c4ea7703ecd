package compiler

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/bootops/bootops/plan"
)

// WriteDir writes the Plan and every rendered artifact under dir, byte for
// byte the same for the same Plan:
//
//	plan.json
//	sites/<site>/site.json                  the site without its nodes
//	sites/<site>/dhcp-reservations.json     reservation mode only (either family)
//	sites/<site>/dnsmasq-hosts              the same, as dnsmasq dhcp-hostsfile
//	sites/<site>/unknown/boot.ipxe, workflow.json
//	sites/<site>/nodes/<node>/boot.ipxe, user-data, meta-data, network-config, workflow.json
//
// The tree is written beside dir and renamed over it, so a reader never sees
// half of it. An existing dir is replaced only if it holds a plan.json.
func WriteDir(p *plan.Plan, dir string) error {
	dir = filepath.Clean(dir)
	if st, err := os.Stat(dir); err == nil {
		if !st.IsDir() {
			return fmt.Errorf("write %s: not a directory", dir)
		}
		if _, err := os.Stat(filepath.Join(dir, "plan.json")); err != nil {
			ents, _ := os.ReadDir(dir)
			if len(ents) > 0 {
				return fmt.Errorf("write %s: exists and is not a bootops output (no plan.json): refusing to replace it", dir)
			}
		}
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return fmt.Errorf("write %s: %w", dir, err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "."+filepath.Base(dir)+".tmp-")
	if err != nil {
		return fmt.Errorf("write %s: %w", dir, err)
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	if err := writeTree(p, tmp); err != nil {
		return fmt.Errorf("write %s: %w", dir, err)
	}
	old := ""
	if _, err := os.Stat(dir); err == nil {
		old = tmp + ".old"
		if err := os.Rename(dir, old); err != nil {
			return fmt.Errorf("write %s: %w", dir, err)
		}
	}
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("write %s: %w", dir, err)
	}
	if old != "" {
		return os.RemoveAll(old)
	}
	return nil
}

// File is one file of a compiled output, its path slash-separated.
type File struct {
	Path string
	Data []byte
}

func writeTree(p *plan.Plan, dir string) error {
	dirs := []string{dir}
	for _, s := range p.Sites {
		sd := filepath.Join(dir, "sites", s.Name)
		dirs = append(dirs, sd, filepath.Join(sd, "unknown"))
		for _, n := range s.Nodes {
			dirs = append(dirs, filepath.Join(sd, "nodes", n.Name))
		}
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	// Writing tens of thousands of small files is dominated by system
	// calls that wait on the filesystem: keep several in flight per core.
	// Files are made as they are written, so memory stays bounded.
	files := make(chan File, 256)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for range 4 * runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for f := range files {
				if err := os.WriteFile(filepath.Join(dir, f.Path), f.Data, 0o644); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		}()
	}
	err := eachFile(p, func(f File) error {
		files <- f
		return nil
	})
	close(files)
	wg.Wait()
	return errors.Join(append(errs, err)...)
}

// Files returns every file WriteDir writes, in a fixed order.
func Files(p *plan.Plan) ([]File, error) {
	var files []File
	err := eachFile(p, func(f File) error {
		files = append(files, f)
		return nil
	})
	return files, err
}

// eachFile makes every output file in a fixed order and hands it to emit.
func eachFile(p *plan.Plan, emit func(File) error) error {
	add := func(data []byte, parts ...string) error {
		return emit(File{path.Join(parts...), data})
	}
	pj, err := marshal(p)
	if err != nil {
		return err
	}
	if err := add(pj, "plan.json"); err != nil {
		return err
	}
	for _, s := range p.Sites {
		sd := []string{"sites", s.Name}
		head := *s
		head.Nodes = nil
		b, err := marshal(&head)
		if err != nil {
			return err
		}
		if err := add(b, append(sd, "site.json")...); err != nil {
			return err
		}
		if s.Network.DHCP == plan.DHCPReservation || s.Network.IPv6 != nil && s.Network.IPv6.DHCP == plan.DHCPReservation {
			b, err := marshal(s.Reservations)
			if err != nil {
				return err
			}
			if err := errors.Join(
				add(b, append(sd, "dhcp-reservations.json")...),
				add([]byte(DnsmasqHosts(s)), append(sd, "dnsmasq-hosts")...)); err != nil {
				return err
			}
		}
		if s.Unknown != nil {
			b, err := marshal(s.Unknown.Workflow)
			if err != nil {
				return err
			}
			if err := errors.Join(
				add([]byte(s.Unknown.IPXE), append(sd, "unknown", "boot.ipxe")...),
				add(b, append(sd, "unknown", "workflow.json")...)); err != nil {
				return err
			}
		}
		for _, n := range s.Nodes {
			nd := append(append([]string{}, sd...), "nodes", n.Name)
			a := n.Artifacts
			wf, err := marshal(a.Workflow)
			if err != nil {
				return err
			}
			if err := errors.Join(
				add([]byte(a.IPXE), append(nd, "boot.ipxe")...),
				add([]byte(a.UserData), append(nd, "user-data")...),
				add([]byte(a.MetaData), append(nd, "meta-data")...),
				add([]byte(a.NetworkConfig), append(nd, "network-config")...),
				add(wf, append(nd, "workflow.json")...)); err != nil {
				return err
			}
		}
	}
	return nil
}

func marshal(v any) ([]byte, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// DnsmasqHosts renders a reservation site's leases in dnsmasq's
// dhcp-hostsfile format: one "mac,ip,hostname" line per MAC, the IPv6
// address in brackets after the IPv4 one ("mac,ip,[ipv6],hostname"), or
// alone.
func DnsmasqHosts(s *plan.Site) string {
	var b strings.Builder
	for _, r := range s.Reservations {
		addrs := ""
		if r.IP != "" {
			addrs += r.IP + ","
		}
		if r.IPv6 != "" {
			addrs += "[" + r.IPv6 + "],"
		}
		for _, m := range r.MACs {
			fmt.Fprintf(&b, "%s,%s%s\n", m, addrs, r.Hostname)
		}
	}
	return b.String()
}
