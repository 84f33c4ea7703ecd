package interop

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/bootops/bootops/plan"
)

// Action images of the Tinkerbell project (its actions and hub), the ones
// its documentation and EIM's templates use. A Template can be edited to
// point at a mirror.
const (
	TinkerbellImage2Disk = "quay.io/tinkerbell/actions/image2disk:latest"
	TinkerbellWriteFile  = "quay.io/tinkerbell/actions/writefile:latest"
	TinkerbellCexec      = "quay.io/tinkerbell/actions/cexec:latest"
	TinkerbellKexec      = "quay.io/tinkerbell/actions/kexec:latest"
	TinkerbellReboot     = "public.ecr.aws/l0g8r8j6/tinkerbell/hub/reboot-action:latest"
	// TinkerbellWaitDaemon runs its command once the worker has reported
	// the action done: the way to power off without leaving the workflow
	// running forever.
	TinkerbellWaitDaemon = "ghcr.io/jacobweinstock/waitdaemon:latest"
	// TinkerbellShell runs what has no dedicated action (wiping a disk, a
	// command outside the new system).
	TinkerbellShell = "docker.io/library/alpine:3.20"
)

// tinkAction is one Tinkerbell action with every value resolved for a node.
type tinkAction struct {
	Name    string
	Image   string
	Timeout int64 // seconds
	Pid     string
	Volumes []string
	Command []string
	Env     []tinkEnv // in this order in the template
}

type tinkEnv struct{ Key, Value string }

// values are the action's per-node values: the command's words, then the
// environment's values. Everything else is the same for a profile's nodes.
func (a *tinkAction) values() []*string {
	var v []*string
	for i := range a.Command {
		v = append(v, &a.Command[i])
	}
	for i := range a.Env {
		v = append(v, &a.Env[i].Value)
	}
	return v
}

// valueName names value j for a hardwareMap key.
func (a *tinkAction) valueName(j int) string {
	if j < len(a.Command) {
		return "command_" + strconv.Itoa(j)
	}
	return a.Env[j-len(a.Command)].Key
}

// actionsLayout is what must match for nodes to share a Template: all but
// the values.
func actionsLayout(acts []tinkAction) string {
	var b strings.Builder
	for _, a := range acts {
		fmt.Fprintf(&b, "%q %q %d %q %q %d", a.Name, a.Image, a.Timeout, a.Pid, a.Volumes, len(a.Command))
		for _, e := range a.Env {
			b.WriteString(" " + e.Key)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// tinkActions maps one bootops action to Tinkerbell actions (cloud-init
// becomes one writefile per seed file).
func tinkActions(a plan.Action, n *plan.Node, disk string) ([]tinkAction, error) {
	timeout, err := tinkTimeout(a)
	if err != nil {
		return nil, err
	}
	act := tinkAction{Name: a.Name, Timeout: timeout}
	part := plan.PartitionDevice(disk, a.Partition)
	switch a.Action {
	case "wipe-disk":
		act.Image = TinkerbellShell
		act.Command = []string{"/bin/sh", "-c", wipeDiskScript}
		act.Env = []tinkEnv{{"DEST_DISK", disk}}
	case "image-to-disk":
		// image2disk picks the decompressor from the URL's suffix.
		act.Image = TinkerbellImage2Disk
		act.Env = []tinkEnv{{"IMG_URL", a.URL}, {"DEST_DISK", disk}, {"COMPRESSED", strconv.FormatBool(a.Compression != "" && a.Compression != "none")}}
	case "write-file":
		act.Image = TinkerbellWriteFile
		act.Env = writeFileEnv(part, a.FSType, a.Path, a.Content, a.Mode, "0755")
	case "cloud-init":
		return tinkCloudInit(act, a, n, part), nil
	case "exec":
		if a.Chroot {
			act.Image = TinkerbellCexec
			act.Env = []tinkEnv{{"BLOCK_DEVICE", part}, {"FS_TYPE", a.FSType}, {"CHROOT", "y"},
				{"DEFAULT_INTERPRETER", "/bin/sh -c"}, {"CMD_LINE", shellJoin(a.Command)}}
		} else {
			// bootops runs it in the Micro-OS; Tinkerbell in a container of
			// its worker OS, with /dev.
			act.Image = TinkerbellShell
			act.Command = append([]string(nil), a.Command...)
		}
	case "reboot":
		act.Image = TinkerbellReboot
		act.Volumes = []string{"/worker:/worker"}
	case "poweroff":
		act.Image = TinkerbellWaitDaemon
		act.Pid = "host"
		act.Command = []string{"poweroff"}
		act.Volumes = []string{"/var/run/docker.sock:/var/run/docker.sock"}
		act.Env = []tinkEnv{{"IMAGE", TinkerbellShell}, {"WAIT_SECONDS", "10"}}
	case "kexec":
		act.Image = TinkerbellKexec
		act.Pid = "host"
		act.Env = kexecEnv(a, part)
	default:
		return nil, fmt.Errorf("action %s: %q has no Tinkerbell equivalent", a.Name, a.Action)
	}
	return []tinkAction{act}, nil
}

// tinkTimeout is the action's timeout in whole seconds, rounded up (0:
// none).
func tinkTimeout(a plan.Action) (int64, error) {
	if a.Timeout == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(a.Timeout)
	if err != nil {
		return 0, fmt.Errorf("action %s: timeout %q: %v", a.Name, a.Timeout, err)
	}
	return int64((d + time.Second - 1) / time.Second), nil
}

// wipeDiskScript does as the agent does: it zeroes the first and the last
// MiB of $DEST_DISK, where the partition tables (GPT's primary and backup,
// MBR) live.
const wipeDiskScript = `set -e; dev=$(readlink -f "$DEST_DISK"); ` +
	`sectors=$(cat "/sys/class/block/${dev##*/}/size"); ` +
	`dd if=/dev/zero of="$dev" bs=512 count=2048; ` +
	`if [ "$sectors" -gt 4096 ]; then dd if=/dev/zero of="$dev" bs=512 count=2048 seek=$((sectors - 2048)); fi; sync`

// tinkCloudInit is a cloud-init action as one writefile action, made from
// act, per seed file (user-data, meta-data, network-config if any).
func tinkCloudInit(act tinkAction, a plan.Action, n *plan.Node, part string) []tinkAction {
	user := n.Artifacts.UserData
	if a.Content != "" {
		user = a.Content // the agent writes an action's own content as user-data
	}
	files := []struct{ name, data string }{{"user-data", user}, {"meta-data", n.Artifacts.MetaData}}
	if n.Artifacts.NetworkConfig != "" {
		files = append(files, struct{ name, data string }{"network-config", n.Artifacts.NetworkConfig})
	}
	var out []tinkAction
	for _, f := range files {
		w := act
		w.Name = a.Name + "-" + f.name
		w.Image = TinkerbellWriteFile
		// user-data may hold secrets: root only, as the agent writes it.
		w.Env = writeFileEnv(part, a.FSType, strings.TrimSuffix(a.Path, "/")+"/"+f.name, f.data, "0600", "0700")
		out = append(out, w)
	}
	return out
}

// kexecEnv is the kexec action's environment: the new system's kernel
// (by default /boot/vmlinuz) and command line (by default its root, read
// only).
func kexecEnv(a plan.Action, part string) []tinkEnv {
	kernel := a.Path
	if kernel == "" {
		kernel = "/boot/vmlinuz"
	}
	cmdline := a.Content
	if cmdline == "" {
		cmdline = "root=" + part + " ro"
	}
	return []tinkEnv{{"BLOCK_DEVICE", part}, {"FS_TYPE", a.FSType},
		{"KERNEL_PATH", kernel}, {"INITRD_PATH", "/boot/initrd.img"}, {"CMD_LINE", cmdline}}
}

func writeFileEnv(part, fsType, path, content, mode, dirMode string) []tinkEnv {
	return []tinkEnv{{"DEST_DISK", part}, {"FS_TYPE", fsType}, {"DEST_PATH", path},
		{"CONTENTS", content}, {"UID", "0"}, {"GID", "0"}, {"MODE", mode}, {"DIRMODE", dirMode}}
}

// shellJoin quotes argv for /bin/sh -c.
func shellJoin(argv []string) string {
	q := make([]string, len(argv))
	for i, s := range argv {
		if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%") == "" {
			q[i] = s
			continue
		}
		q[i] = "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

// templateData writes a group's Template: YAML that Tinkerbell runs
// through Go's text/template with the Workflow's hardwareMap as data. Every
// string is a YAML double-quoted scalar: a value the nodes share is written
// out (with any "{{" escaped for text/template), a value that differs is
// {{ printf "%q" .key }}, which renders to a double-quoted scalar too (Go's
// escapes are a subset of YAML's).
func templateData(g *tinkGroup, s *plan.Site) string {
	var b strings.Builder
	acts := g.nodes[0].actions
	var total int64
	for _, a := range acts {
		total += a.Timeout
	}
	fmt.Fprintf(&b, "# bootops export tinkerbell: profile %s, site %s, %d nodes.\n", g.nodes[0].profile.Name, s.Name, len(g.nodes))
	b.WriteString("# Values written as printf of a key come from each Workflow's hardwareMap:\n# there, the nodes of this template differ.\n")
	fmt.Fprintf(&b, "version: \"0.1\"\nname: %s\nglobal_timeout: %d\ntasks:\n", quoteLiteral(g.name), total)
	b.WriteString("  - name: \"os-installation\"\n    worker: \"{{.device_1}}\"\n    volumes:\n" +
		"      - \"/dev:/dev\"\n      - \"/dev/console:/dev/console\"\n      - \"/lib/firmware:/lib/firmware:ro\"\n    actions:\n")
	for i, a := range acts {
		val := func(j int, v string) string {
			if k := g.varying[i][j]; k != "" {
				return `{{ printf "%q" .` + k + ` }}`
			}
			return quoteLiteral(v)
		}
		fmt.Fprintf(&b, "      - name: %s\n        image: %s\n        timeout: %d\n", quoteLiteral(a.Name), quoteLiteral(a.Image), a.Timeout)
		if a.Pid != "" {
			fmt.Fprintf(&b, "        pid: %s\n", quoteLiteral(a.Pid))
		}
		if len(a.Volumes) > 0 {
			b.WriteString("        volumes:\n")
			for _, v := range a.Volumes {
				fmt.Fprintf(&b, "          - %s\n", quoteLiteral(v))
			}
		}
		if len(a.Command) > 0 {
			b.WriteString("        command:\n")
			for j, v := range a.Command {
				fmt.Fprintf(&b, "          - %s\n", val(j, v))
			}
		}
		if len(a.Env) > 0 {
			b.WriteString("        environment:\n")
			for j, e := range a.Env {
				fmt.Fprintf(&b, "          %s: %s\n", e.Key, val(len(a.Command)+j, e.Value))
			}
		}
	}
	return b.String()
}

// quoteLiteral writes s as a YAML double-quoted scalar that survives
// text/template: "{{" becomes {{"{{"}} outside the quoting.
func quoteLiteral(s string) string {
	parts := strings.Split(s, "{{")
	for i, p := range parts {
		q := strconv.Quote(p)
		parts[i] = q[1 : len(q)-1]
	}
	return `"` + strings.Join(parts, `{{"{{"}}`) + `"`
}
