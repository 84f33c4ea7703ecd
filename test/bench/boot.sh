#!/usr/bin/env bash
# Boot-plane benchmarks, each side by side with reference servers in the
# same run, all on loopback (127.0.0.0/8) with bounded request counts:
#   HTTP: 500 concurrent downloads of a 64 MB initrd from bootops and nginx;
#   TFTP: 200 fetches of ipxe.efi, 100 at a time, from bootops, dnsmasq and
#         tftpd-hpa.
# Prints Markdown tables; raw JSON lines go to test/bench/results/boot.jsonl.
#
#   bash test/bench/boot.sh            (as root: it installs nginx, tftpd-hpa)
#   ONLY=tftp TFTP_ROUNDS=10 bash test/bench/boot.sh   (the TFTP part, more rounds)
set -euo pipefail
cd "$(dirname "$0")/../.."
bash test/deps.sh nginx tftpd-hpa dnsmasq-base ipxe
results=test/bench/results
mkdir -p "$results"
: > "$results/boot.jsonl"
work=$(mktemp -d)
chmod 755 "$work" # nginx and dnsmasq drop root and must read their files
pids=()
cleanup() { set +e; for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
go build -o "$work/bootops" ./cmd/bootops
go build -o "$work/load" ./test/bench/load

run_load() { # NAME ARGS…
  local name=$1; shift
  local line
  line=$("$work/load" "$@")
  echo "{\"server\":\"$name\",\"result\":$line}" >> "$results/boot.jsonl"
  python3 -c 'import json,sys; r=json.loads(sys.argv[2]); print("| %s | %d | %d | %.1f | %.0f | %d |" % (sys.argv[1], r["requests"], r["failures"], r["seconds"], r["mb_per_s"], r["distinct_bodies"]))' "$name" "$line"
}

# -- HTTP ---------------------------------------------------------------
mkdir -p "$work/repo"
if [ "${ONLY:-}" != tftp ]; then
cp -r sites/. "$work/repo"
head -c 64M /dev/urandom > "$work/repo/microos/initrd.img"
echo "small kernel" > "$work/repo/microos/vmlinuz"
chmod -R a+rX "$work/repo"
cat > "$work/nginx.conf" <<CONF
worker_processes auto;
pid $work/nginx.pid;
error_log $work/nginx.err;
events { worker_connections 4096; }
http {
  access_log off;
  sendfile on;
  tcp_nopush on;
  server { listen 127.0.0.1:18080; root $work/repo/microos; }
}
CONF
nginx -c "$work/nginx.conf" -p "$work" -g 'daemon off;' & pids+=($!)
"$work/bootops" serve --source "$work/repo" --state-dir "$work/state" --dhcp off --tftp-addr "" \
  --http-addr 127.0.0.1:18081 --log-format text 2>"$work/bootops-http.log" & bootops_pid=$!; pids+=($bootops_pid)
sleep 2
echo "HTTP: 500 concurrent downloads of a 64 MB initrd ($(nproc) cores, both servers and the client on this machine)"
echo
echo "| server | requests | failed | seconds | MB/s | distinct bodies |"
echo "| --- | --- | --- | --- | --- | --- |"
for round in 1 2 3; do
  run_load "nginx (sendfile)" -url http://127.0.0.1:18080/initrd.img -n 500 -c 500 -verify-every 50
  run_load "bootops" -url http://127.0.0.1:18081/artifacts/microos/default/initrd -n 500 -c 500 -verify-every 50
done
echo
echo "bootops peak RSS during the HTTP runs: $(awk '/VmHWM/ {printf "%d MB", $2/1024}' /proc/$bootops_pid/status)"
else
  cp -r sites/. "$work/repo"; echo k > "$work/repo/microos/vmlinuz"; echo i > "$work/repo/microos/initrd.img"
fi

# -- TFTP ---------------------------------------------------------------
mkdir -p "$work/tftp"
cp -L /usr/lib/ipxe/ipxe.efi /usr/lib/ipxe/undionly.kpxe "$work/tftp/"
chmod -R a+rX "$work/tftp"
dnsmasq --keep-in-foreground --port=0 --enable-tftp --tftp-root="$work/tftp" --listen-address=127.0.0.2 \
  --bind-interfaces --interface=lo --pid-file="$work/dnsmasq.pid" 2>"$work/dnsmasq.log" & pids+=($!)
in.tftpd -L -a 127.0.0.3:69 -s "$work/tftp" & pids+=($!)
"$work/bootops" serve --source "$work/repo" --state-dir "$work/state2" --dhcp off --tftp-addr 127.0.0.4:69 \
  --ipxe-dir "$work/tftp" --http-addr 127.0.0.1:18082 --log-format text 2>"$work/bootops-tftp.log" & pids+=($!)
sleep 2
echo
echo "TFTP: 200 fetches of ipxe.efi ($(stat -c %s "$work/tftp/ipxe.efi") bytes), 100 at a time, blksize 1468"
echo
echo "| server | requests | failed | seconds | MB/s | distinct bodies |"
echo "| --- | --- | --- | --- | --- | --- |"
for round in $(seq "${TFTP_ROUNDS:-2}"); do
  run_load "dnsmasq" -url tftp://127.0.0.2:69/ipxe.efi -n 200 -c 100
  run_load "tftpd-hpa" -url tftp://127.0.0.3:69/ipxe.efi -n 200 -c 100
  run_load "bootops" -url tftp://127.0.0.4:69/ipxe.efi -n 200 -c 100
done
