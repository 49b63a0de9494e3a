#!/bin/sh
# Install the Debian packages listed in .ci/apt-packages.txt that are missing (root + apt only).
set -eu
list="$(dirname "$0")/../.ci/apt-packages.txt"
[ -f "$list" ] || exit 0
missing=""
for pkg in $(grep -v '^#' "$list"); do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing="$missing $pkg"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "note: missing system packages:$missing (install them as root to run every fault)" >&2
  exit 0
fi
echo "installing system packages:$missing"
apt-get update -qq >/dev/null
# servers among them (prometheus, the pushgateway) are for tests that start them on loopback:
# keep the packages from starting system services that listen on every address
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
  trap 'rm -f "$policy"' EXIT
  printf '#!/bin/sh\nexit 101\n' > "$policy"
  chmod +x "$policy"
fi
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
