#!/usr/bin/env bash
# Makes a cluster CA and one certificate per host for hvd's TLS (docs/security.md, "TLS"), with
# openssl(1) only, and the CA's certificate revocation list. For a test or a small cluster; a
# site with its own PKI issues the same shape: a CA certificate, and per host a certificate whose
# subjectAltName names the host (DNS name or IP address) and whose extendedKeyUsage allows
# serverAuth and clientAuth.
#
#   scripts/gen-certs.sh --out DIR --hosts launcher.example,node1,node2,10.0.0.5 [--days N]
#   scripts/gen-certs.sh --out DIR --revoke HOST[,HOST...]   revoke those hosts' certificates
#   scripts/gen-certs.sh --out DIR --crl                     only rewrite DIR/ca.crl (fresh dates)
#
# Writes DIR/ca.crt and DIR/ca.key (keep ca.key off the cluster), DIR/HOST.crt, DIR/HOST.key for
# each host, and DIR/ca.crl, the CA's CRL (valid --days, 825 by default; the revocations are kept
# in DIR/index.txt next to ca.key). Each host certificate also names localhost and 127.0.0.1, so
# that hvdrun on the launcher's machine may dial it there. Then:
#   hvd-launcherd --tls-cert DIR/L.crt --tls-key DIR/L.key --tls-ca DIR/ca.crt ...
#   hvd-agent     --tls-cert DIR/N.crt --tls-key DIR/N.key --tls-ca DIR/ca.crt ...
#   hvdrun        --tls-ca DIR/ca.crt --launcher L:7070 --token-file ...
# each with --tls-crl DIR/ca.crl to refuse revoked certificates (copy ca.crl to every host again
# after --revoke, and restart the processes: they read it at start).
# An existing ca.crt/ca.key in DIR is reused, so hosts can be added later.
set -euo pipefail

usage() {
  # The comment block at the top, up to the first line that is not a comment.
  awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0" >&2
  exit 2
}

out="" hosts="" days=825 revoke="" crl_only=0
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="${2:-}"; shift 2 || usage ;;
    --out=*) out="${1#*=}"; shift ;;
    --hosts) hosts="${2:-}"; shift 2 || usage ;;
    --hosts=*) hosts="${1#*=}"; shift ;;
    --days) days="${2:-}"; shift 2 || usage ;;
    --days=*) days="${1#*=}"; shift ;;
    --revoke) revoke="${2:-}"; shift 2 || usage ;;
    --revoke=*) revoke="${1#*=}"; shift ;;
    --crl) crl_only=1; shift ;;
    -h|--help) usage ;;
    *) echo "gen-certs: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$out" ] || { echo "gen-certs: --out DIR is required" >&2; exit 2; }
[ -n "$hosts" ] || [ -n "$revoke" ] || [ "$crl_only" = 1 ] ||
  { echo "gen-certs: --hosts NAME[,NAME...] is required (or --revoke HOST, or --crl)" >&2; exit 2; }
[[ "$days" =~ ^[0-9]+$ ]] && [ "$days" -gt 0 ] ||
  { echo "gen-certs: --days must be a positive number, got '$days'" >&2; exit 2; }
command -v openssl >/dev/null ||
  { echo "gen-certs: openssl is not installed (apt-get install openssl)" >&2; exit 1; }

umask 077  # keys are created 0600
mkdir -p "$out"
log() { echo "gen-certs: $*" >&2; }

# openssl ca keeps the revocations in DIR/index.txt; its config is made on the fly.
ca_cmd() {
  local cnf
  cnf="$(mktemp)"
  printf '%s\n' "[ca]" "default_ca=hvd" "[hvd]" "database=$out/index.txt" \
    "crlnumber=$out/crlnumber" "default_md=sha256" "unique_subject=no" > "$cnf"
  [ -f "$out/index.txt" ] || : > "$out/index.txt"
  [ -f "$out/crlnumber" ] || echo 01 > "$out/crlnumber"
  local rc=0
  openssl ca -batch -config "$cnf" -cert "$out/ca.crt" -keyfile "$out/ca.key" "$@" || rc=$?
  rm -f "$cnf"
  return $rc
}
write_crl() {
  ca_cmd -gencrl -crldays "$days" -out "$out/ca.crl" 2>/dev/null ||
    { echo "gen-certs: openssl could not write $out/ca.crl" >&2; exit 1; }
  chmod 644 "$out/ca.crl"
}

if [ -n "$revoke" ] || [ "$crl_only" = 1 ]; then
  [ -f "$out/ca.key" ] && [ -f "$out/ca.crt" ] ||
    { echo "gen-certs: no CA in $out (ca.crt and ca.key); --out must name the directory that made the certificates" >&2; exit 2; }
  IFS=',' read -r -a names <<< "$revoke"
  for host in "${names[@]}"; do
    [ -n "$host" ] || continue
    file="$out/${host//:/_}.crt"
    [ -f "$file" ] || { echo "gen-certs: no certificate $file to revoke" >&2; exit 2; }
    if ! why="$(ca_cmd -revoke "$file" 2>&1)"; then
      case "$why" in
        *"Already revoked"*) log "$file was revoked already" ;;
        *) echo "gen-certs: openssl could not revoke $file: $why" >&2; exit 1 ;;
      esac
    else
      log "revoked $file ($(openssl x509 -in "$file" -noout -serial))"
    fi
  done
  write_crl
  log "wrote $out/ca.crl; copy it to every host and restart the hvd processes given --tls-crl"
  exit 0
fi

if [ ! -f "$out/ca.key" ] || [ ! -f "$out/ca.crt" ]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$out/ca.key" -out "$out/ca.crt" -days "$days" -subj "/CN=hvd cluster CA" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
  chmod 644 "$out/ca.crt"
  log "made the cluster CA $out/ca.crt"
fi

IFS=',' read -r -a names <<< "$hosts"
for host in "${names[@]}"; do
  [ -n "$host" ] || continue
  if ! [[ "$host" =~ ^[A-Za-z0-9._:-]+$ ]]; then
    echo "gen-certs: '$host' is not a host name or address" >&2
    exit 2
  fi
  if [[ "$host" =~ ^[0-9.]+$ || "$host" == *:* ]]; then
    san="IP:$host"
  else
    san="DNS:$host"
  fi
  [ "$host" = localhost ] || san="$san,DNS:localhost"
  [ "$host" = 127.0.0.1 ] || san="$san,IP:127.0.0.1"
  file="${host//:/_}"  # IPv6 addresses make file names without colons
  ext="$(mktemp)"
  trap 'rm -f "$ext" "$out/$file.csr"' EXIT
  printf '%s\n' "subjectAltName=$san" "basicConstraints=critical,CA:FALSE" \
    "keyUsage=critical,digitalSignature,keyEncipherment" \
    "extendedKeyUsage=serverAuth,clientAuth" > "$ext"
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$out/$file.key" -out "$out/$file.csr" -subj "/CN=$host" 2>/dev/null
  openssl x509 -req -in "$out/$file.csr" -CA "$out/ca.crt" -CAkey "$out/ca.key" \
    -CAcreateserial -days "$days" -extfile "$ext" -out "$out/$file.crt" 2>/dev/null
  chmod 644 "$out/$file.crt"
  rm -f "$ext" "$out/$file.csr"
  trap - EXIT
  log "made $out/$file.crt and $out/$file.key for $host ($san)"
done
rm -f "$out/ca.srl"
write_crl
log "wrote $out/ca.crl (for --tls-crl)"
