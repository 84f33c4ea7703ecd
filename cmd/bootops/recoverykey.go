package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"filippo.io/age"
	"filippo.io/age/armor"

	boothttp "github.com/bootops/bootops/boot/http"
	"github.com/bootops/bootops/boot/status"
)

// maxRecoveryKey bounds what a decrypted escrow may hold: a LUKS
// passphrase, not a file.
const maxRecoveryKey = 4 << 10

func recoveryKeyCmd() *command {
	c := &command{
		name:    "recovery-key",
		summary: "Fetch a node's escrowed disk recovery key (ciphertext) from the daemon and decrypt it here with your age identity: the passphrase for cryptsetup open.",
		usage:   "NODE|SITE/NODE --identity FILE [--site S] [--partition N] [--luks-uuid U] [--server URL] [--token-file F]",
		example: "  bootops recovery-key rack1-12 --identity ~/.config/bootops/age.key --token-file /etc/bootops/ui-token\n" +
			"  # the key alone is on stdout: type it at the node's passphrase prompt, or pipe it (cryptsetup reads a line)\n" +
			"  bootops recovery-key lab/rack1-12 --identity key.txt | ssh root@rescue cryptsetup open /dev/sda2 bootops-root\n" +
			"  # the escrow of the container the disk holds (cryptsetup luksUUID /dev/sda2 on the node), when a reinstall failed before it wrote it:\n" +
			"  bootops recovery-key rack1-12 --identity key.txt --luks-uuid 0c5ae3a1-7f0e-4a7c-9d1e-2b1f5c4d3e2f",
	}
	c.run = func(ctx context.Context, e *env, args []string) error {
		fs := c.flags(e)
		d := addPowerFlags(fs, e, "give up on the daemon after this long")
		identity := fs.String("identity", "", "an age identity `file` (AGE-SECRET-KEY-1…, as age-keygen writes it) of one of the profile's encryption recipients")
		site := fs.String("site", "", "the node's site, when NODE does not name it")
		partition := fs.Int("partition", 0, "the encrypted partition's number (default: the newest escrow, whichever partition)")
		luksUUID := fs.String("luks-uuid", "", "the LUKS container's UUID (cryptsetup luksUUID): the escrow of that container, of the kept ones")
		pos, err := parse(fs, e, args)
		if err != nil {
			return err
		}
		if len(pos) != 1 {
			return usagef("want one node: NODE or SITE/NODE")
		}
		if *identity == "" {
			return usagef("--identity FILE: the age identity to decrypt the escrow with")
		}
		ids, err := loadIdentities(*identity)
		if err != nil {
			return err
		}
		token, err := d.token(e)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(ctx, *d.timeout)
		defer cancel()
		rk, err := fetchRecoveryKeys(ctx, strings.TrimSuffix(*d.server, "/"), *site, pos[0], token)
		if err != nil {
			return err
		}
		esc, err := pickEscrow(rk, *partition, *luksUUID)
		if err != nil {
			return err
		}
		key, err := decryptEscrow(esc, ids, *identity)
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stderr, "recovery key of %s/%s: partition %d, LUKS %s, install of generation %d, escrowed %s\n",
			rk.Site, rk.Node, esc.Partition, status.Printable(esc.LUKSUUID), esc.Generation, esc.Time.Format(time.RFC3339))
		fmt.Fprintln(e.stdout, key)
		return nil
	}
	return c
}

// loadIdentities reads an age identity file (AGE-SECRET-KEY-1… lines,
// '#' comments).
func loadIdentities(file string) ([]age.Identity, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("--identity: %w", err)
	}
	defer f.Close()
	ids, err := age.ParseIdentities(io.LimitReader(f, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("--identity %s: not an age identity file (as age-keygen writes it): %w", file, err)
	}
	return ids, nil
}

// fetchRecoveryKeys asks the daemon for the node's escrows; site, when
// set, names the node's site.
func fetchRecoveryKeys(ctx context.Context, base, site, node, token string) (boothttp.RecoveryKeys, error) {
	var rk boothttp.RecoveryKeys
	key := node
	if site != "" {
		if strings.Contains(node, "/") {
			return rk, usagef("--site %s and %s: name the site once", site, node)
		}
		key = site + "/" + node
	}
	key, err := machineKey(ctx, base, key)
	if err != nil {
		return rk, err
	}
	if !status.IsNodeKey(key) {
		return rk, usagef("%q is no node: want NODE or SITE/NODE", key)
	}
	s, n, _ := strings.Cut(key, "/")
	err = callJSON(ctx, http.MethodGet, base+"/api/v1/recovery-keys/"+s+"/"+n, token, nil, &rk)
	return rk, err
}

// pickEscrow is the escrow the operator asks for: of the container
// luksUUID, else the newest of partition (0: any).
func pickEscrow(rk boothttp.RecoveryKeys, partition int, luksUUID string) (status.Escrow, error) {
	if len(rk.Escrows) == 0 {
		return status.Escrow{}, fmt.Errorf("node %s/%s has no escrowed recovery key: it was never installed encrypted, or its agent could not post the escrow (see bootops logs)", rk.Site, rk.Node)
	}
	var kept []string
	for _, e := range rk.Escrows {
		if (partition == 0 || e.Partition == partition) && (luksUUID == "" || strings.EqualFold(e.LUKSUUID, luksUUID)) {
			return e, nil
		}
		kept = append(kept, fmt.Sprintf("partition %d LUKS %s (generation %d)", e.Partition, status.Printable(e.LUKSUUID), e.Generation))
	}
	return status.Escrow{}, fmt.Errorf("node %s/%s has no escrow of that partition or container; it keeps: %s", rk.Site, rk.Node, strings.Join(kept, "; "))
}

// decryptEscrow decrypts esc's ciphertext with ids, read from file, and
// returns the recovery key, refused when it is not printable text (a
// site may forward any ciphertext: nothing it holds reaches the terminal).
func decryptEscrow(esc status.Escrow, ids []age.Identity, file string) (string, error) {
	r, err := age.Decrypt(armor.NewReader(strings.NewReader(strings.TrimSpace(esc.Ciphertext)+"\n")), ids...)
	var none *age.NoIdentityMatchError
	if errors.As(err, &none) {
		return "", fmt.Errorf("none of the escrow's %d recipients (%s) matches the identity in %s", len(esc.Recipients), strings.Join(printableAll(esc.Recipients), ", "), file)
	}
	if err != nil {
		return "", fmt.Errorf("decrypting the escrow with the identity in %s: %w", file, err)
	}
	b, err := io.ReadAll(io.LimitReader(r, maxRecoveryKey+1))
	if err != nil {
		return "", fmt.Errorf("decrypting the escrow with the identity in %s: %w", file, err)
	}
	key := strings.TrimRight(string(b), "\r\n")
	if len(b) > maxRecoveryKey || key == "" || status.Printable(key) != key {
		return "", fmt.Errorf("the escrow decrypted with %s, but what it holds is no recovery key (empty, over %d bytes, or not printable text): not printed", file, maxRecoveryKey)
	}
	return key, nil
}

func printableAll(in []string) []string {
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = status.Printable(s)
	}
	return out
}
