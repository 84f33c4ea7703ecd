package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	bhttp "github.com/bootops/bootops/boot/http"
	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/plan"
)

func inventoryCmd() *command {
	c := &command{
		name:    "inventory",
		summary: "Show the hardware each machine's agent read in the Micro-OS (system, CPU, memory, disks, NICs, PCI, TPM), from a running daemon.",
		usage:   "[NODE|SITE/NODE] [--site S] [--server URL] [-o table|json|csv]",
		example: "  bootops inventory                       # every node, one line each\n  bootops inventory rack1-12 -o json      # one node, all of it\n  bootops inventory --site warehouse -o csv > inventory.csv",
	}
	c.run = func(ctx context.Context, e *env, args []string) error {
		fs := c.flags(e)
		server := serverFlag(fs, e, defaultServer)
		site := fs.String("site", "", "only this site's nodes")
		format := fs.String("o", "table", "output: table, json or csv")
		pos, err := parse(fs, e, args)
		if err != nil {
			return err
		}
		if len(pos) > 1 {
			return usagef("at most one node")
		}
		if *format != "table" && *format != "json" && *format != "csv" {
			return usagef("-o %q: want table, json or csv", *format)
		}
		var doc statusDoc
		if _, err := fetchStatus(ctx, strings.TrimSuffix(*server, "/")+"/api/v1/status?inventory=1", &doc); err != nil {
			return noAnswer(*server, err)
		}
		if err := checkSite(*site, doc); err != nil {
			return err
		}
		var ms []status.Machine
		for _, m := range doc.Nodes {
			switch {
			case *site != "" && m.Site != *site:
			case len(pos) == 1 && pos[0] != m.Node && pos[0] != m.Key:
			default:
				ms = append(ms, m)
			}
		}
		if len(pos) == 1 && len(ms) == 0 {
			return fmt.Errorf("no node %q", pos[0])
		}
		switch *format {
		case "json":
			out := map[string]*plan.Inventory{}
			for _, m := range ms {
				out[m.Key] = m.Inventory
			}
			enc := json.NewEncoder(e.stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(out)
		case "csv":
			return inventoryCSV(e, ms)
		}
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NODE\tSITE\tSYSTEM\tSERIAL\tCPU\tTHREADS\tMEMORY\tDISKS\tNICS\tPCI\tTPM")
		for _, m := range ms {
			in := m.Inventory
			if in == nil {
				fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\t-\t-\t-\t-\t-\n", m.Node, m.Site)
				continue
			}
			// Each cell through Printable: what a machine sent cannot
			// add a column or a line.
			p := status.Printable
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%d\t%s\n", p(m.Node), p(m.Site), p(or(strings.TrimSpace(in.System.Vendor+" "+in.System.Product), "-")),
				p(or(in.System.Serial, "-")), p(or(in.CPU.Model, "-")), in.CPU.Threads, gib(in.Memory.Total), p(disksOf(in)), p(nicsOf(in)), len(in.PCI), p(tpmOf(in)))
		}
		return tw.Flush()
	}
	return c
}

// checkSite refuses a --site that is none of the sites in the daemon's
// status document (its nodes' sites; a hub's site daemons): filtered by
// a typo, the output would be empty and the exit 0.
func checkSite(site string, doc statusDoc) error {
	if site == "" {
		return nil
	}
	known := map[string]bool{}
	for _, m := range doc.Nodes {
		known[m.Site] = true
	}
	for _, s := range doc.Sites {
		known[s.Name] = true
	}
	if known[site] {
		return nil
	}
	names := slices.Sorted(maps.Keys(known))
	if len(names) == 0 {
		return fmt.Errorf("no site %q (the daemon serves no node yet)", site)
	}
	return fmt.Errorf("no site %q (sites: %s)", site, strings.Join(names, ", "))
}

func gib(n int64) string {
	if n <= 0 {
		return "-"
	}
	return strconv.FormatFloat(float64(n)/(1<<30), 'f', 1, 64) + " GiB"
}

func disksOf(in *plan.Inventory) string {
	var out []string
	for _, d := range in.Disks {
		out = append(out, fmt.Sprintf("%s %.0f GB", d.Name, float64(d.Size)/1e9))
	}
	return or(strings.Join(out, ", "), "-")
}

func nicsOf(in *plan.Inventory) string {
	var out []string
	for _, n := range in.NICs {
		s := n.MAC
		if n.Speed > 0 {
			s += fmt.Sprintf(" %d Mb/s", n.Speed)
		}
		out = append(out, s)
	}
	return or(strings.Join(out, ", "), "-")
}

func tpmOf(in *plan.Inventory) string {
	if !in.TPM.Present {
		return "-"
	}
	return or(in.TPM.Version, "yes")
}

func inventoryCSV(e *env, ms []status.Machine) error {
	w := csv.NewWriter(e.stdout)
	w.Write([]string{"site", "node", "vendor", "product", "serial", "bios", "cpu", "sockets", "cores", "threads", "memory_bytes", "disks", "nics", "pci", "tpm", "secure_boot"})
	for _, m := range ms {
		in := m.Inventory
		if in == nil {
			in = &plan.Inventory{}
		}
		var pci []string
		for _, p := range in.PCI {
			pci = append(pci, p.Vendor+":"+p.Device+"/"+p.Class)
		}
		row := []string{m.Site, m.Node, in.System.Vendor, in.System.Product, in.System.Serial, strings.TrimSpace(in.System.BIOSVendor + " " + in.System.BIOSVersion),
			in.CPU.Model, strconv.Itoa(in.CPU.Sockets), strconv.Itoa(in.CPU.Cores), strconv.Itoa(in.CPU.Threads), strconv.FormatInt(in.Memory.Total, 10),
			disksOf(in), nicsOf(in), strings.Join(pci, " "), tpmOf(in), strconv.FormatBool(in.SecureBoot)}
		for i := range row {
			row[i] = status.CSVCell(row[i])
		}
		w.Write(row)
	}
	w.Flush()
	return w.Error()
}

func reportCmd() *command {
	c := &command{
		name:    "report",
		summary: "Print the delivery record: one row per machine with its serial, MACs, hardware, expectations, QA results, installed image and install digest, Git revision, and when it was provisioned and running.",
		usage:   "[--site S] [--since DURATION|TIME] [--server URL] [-o csv|json]",
		example: "  bootops report --site warehouse > delivery.csv\n  bootops report --site warehouse --since 24h -o json\n  bootops report --since 2026-11-25T06:00:00Z",
	}
	c.run = func(ctx context.Context, e *env, args []string) error {
		fs := c.flags(e)
		server := serverFlag(fs, e, defaultServer)
		site := fs.String("site", "", "only this site's machines")
		since := fs.String("since", "", "only machines provisioned since: a duration back from now (24h) or a time (RFC 3339)")
		format := fs.String("o", "csv", "output: csv or json")
		if err := parseNone(fs, e, args); err != nil {
			return err
		}
		if *format != "csv" && *format != "json" {
			return usagef("-o %q: want csv or json", *format)
		}
		q := url.Values{}
		if *site != "" {
			q.Set("site", *site)
		}
		if *since != "" {
			t, err := time.Parse(time.RFC3339, *since)
			if err != nil {
				d, derr := time.ParseDuration(*since)
				if derr != nil || d <= 0 {
					return usagef("--since %q: want a duration such as 24h or a time such as 2026-11-25T06:00:00Z", *since)
				}
				t = time.Now().Add(-d)
			}
			q.Set("since", t.UTC().Format(time.RFC3339))
		}
		if *site != "" {
			// The record of a site the daemon does not serve is empty:
			// a typo must not pass for a site with nothing delivered.
			var doc statusDoc
			if _, err := fetchStatus(ctx, *server+"/api/v1/status", &doc); err != nil {
				return noAnswer(*server, err)
			}
			if err := checkSite(*site, doc); err != nil {
				return err
			}
		}
		var recs []bhttp.DeliveryRecord
		if err := getJSON(ctx, strings.TrimSuffix(*server, "/")+"/api/v1/report?"+q.Encode(), &recs); err != nil {
			return noAnswer(*server, err)
		}
		if *format == "json" {
			enc := json.NewEncoder(e.stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(recs)
		}
		return bhttp.WriteDeliveryCSV(e.stdout, recs)
	}
	return c
}
