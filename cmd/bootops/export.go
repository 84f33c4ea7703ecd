package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/bootops/bootops/compiler"
	"github.com/bootops/bootops/interop"
)

func exportCmd() *command {
	c := &command{
		name:    "export",
		summary: "Write a site as objects for another provisioning system: Tinkerbell's Hardware, Template and Workflow.",
		usage:   "tinkerbell [DIR] --site SITE -o OUT [--namespace NS] [--auto-disk DEVICE]",
		example: "  bootops export tinkerbell examples/warehouse --site warehouse --auto-disk /dev/sda -o out/tink\n" +
			"  kubectl apply -f out/tink/\n" +
			"  # exit 0: written (nodes Tinkerbell cannot take are listed on stderr) · 1: invalid repo, unknown site or\n" +
			"  # an object Kubernetes would refuse (nothing written) · 2: usage, a --namespace Kubernetes refuses\n" +
			"\n" +
			"Output (tinkerbell.org/v1alpha1, one multi-document YAML file per kind, byte-for-byte deterministic):\n" +
			"  OUT/hardware.yaml   a Hardware per node: its MACs (DHCP; the reserved IP, netmask, gateway and DNS\n" +
			"                      on the first interface in reservation mode), hostname, arch, disk, netboot\n" +
			"                      allowed, metadata (instance id = the NoCloud instance-id), userData\n" +
			"  OUT/templates.yaml  a Template per profile: its workflow as actions; worker is {{.device_1}}\n" +
			"  OUT/workflows.yaml  a Workflow per node: templateRef, hardwareRef, hardwareMap (device_1 = the\n" +
			"                      node's first MAC, plus the values in which the profile's nodes differ:\n" +
			"                      cloud-init seed, contents with ${node}...), toggleAllowNetboot\n" +
			"Actions: wipe-disk → alpine zeroing the first and last MiB · image-to-disk → image2disk (IMG_URL,\n" +
			"  DEST_DISK, COMPRESSED; it picks the decompressor from the URL's suffix) · write-file → writefile ·\n" +
			"  cloud-init → writefile of user-data, meta-data, network-config (NoCloud seed) · exec → cexec\n" +
			"  (chroot) or alpine (command) · reboot → reboot-action · poweroff → waitdaemon · kexec → kexec\n" +
			"Not exported: nodes without a MAC (Tinkerbell's DHCP finds a Hardware by MAC) and, unless\n" +
			"  --auto-disk is given, nodes whose disk is auto; both listed on stderr as skipped.\n" +
			"No equivalent: the Micro-OS and its iPXE script (Tinkerbell boots its own HookOS), the image's\n" +
			"  sha256 check, action retries, the site's unknownNodes policy and DHCP mode (Smee's settings),\n" +
			"  reprovision (delete and re-create the Workflow), kexec reading /etc/kernel/cmdline (CMD_LINE is\n" +
			"  root=PARTITION ro), node labels.",
	}
	c.run = func(ctx context.Context, e *env, args []string) error {
		if len(args) == 0 || strings.HasPrefix(args[0], "-") {
			if len(args) > 0 && (strings.Trim(args[0], "-") == "help" || strings.Trim(args[0], "-") == "h") {
				_, err := parse(c.flags(e), e, args[:1])
				return err
			}
			return usagef("want a target first: bootops export tinkerbell [DIR] --site SITE -o OUT")
		}
		if args[0] != "tinkerbell" {
			return usagef("unknown target %q: want tinkerbell%s", args[0], compiler.DidYouMean(args[0], []string{"tinkerbell"}))
		}
		return exportTinkerbell(c, e, args[1:])
	}
	return c
}

func exportTinkerbell(c *command, e *env, args []string) error {
	fs := c.flags(e)
	site := fs.String("site", "", "the site to export (required)")
	out := fs.String("o", "", "folder to write hardware.yaml, templates.yaml and workflows.yaml into (required; created)")
	ns := fs.String("namespace", "tink-system", "namespace of every object (a DNS-1123 label: at most 63 of a-z, 0-9 and '-')")
	autoDisk := fs.String("auto-disk", "", "device for nodes whose disk is auto, e.g. /dev/sda (default: skip them)")
	dir, err := parseDir(fs, e, args)
	if err != nil {
		return err
	}
	if *site == "" || *out == "" {
		return usagef("want --site SITE and -o OUT")
	}
	if *autoDisk != "" && !strings.HasPrefix(*autoDisk, "/dev/") {
		return usagef("--auto-disk %q: want a device path such as /dev/sda", *autoDisk)
	}
	// Checked before the repository is compiled: a namespace Kubernetes
	// refuses is a mistake in the command line, not in the repository.
	if err := interop.CheckTinkerbellNamespace(*ns); err != nil {
		return usagef("--namespace %q: %v", *ns, err)
	}
	p, err := compileDir(e, dir)
	if err != nil {
		return err
	}
	x, err := interop.ExportTinkerbell(p, *site, interop.TinkerbellOptions{Namespace: *ns, AutoDisk: *autoDisk})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	for _, f := range x.Files {
		if err := writeFileAtomic(filepath.Join(*out, f.Path), f.Data); err != nil {
			return err
		}
	}
	for _, s := range x.Skipped {
		fmt.Fprintf(e.stderr, "skipped %s\n", s)
	}
	nodes := len(p.Site(*site).Nodes)
	if len(x.Skipped) > 0 {
		fmt.Fprintf(e.stderr, "%d of %d nodes skipped: no Tinkerbell Hardware for them\n", len(x.Skipped), nodes)
	}
	fmt.Fprintf(e.stdout, "wrote %s: %d Hardware, %d Template, %d Workflow (site %s, %d of %d nodes, namespace %s)\n",
		*out, x.Hardware, x.Templates, x.Workflows, *site, x.Hardware, nodes, *ns)
	return nil
}
