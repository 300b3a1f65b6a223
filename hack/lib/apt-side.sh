# Sourced by hack/guest-image/build.sh and hack/fetch-qemu10.sh.
#
# apt_side_download SUITE SCRATCH DEST PKG...
#   Downloads each PKG (a name, or name=version) from SUITE of the machine's own Debian
#   mirror (the first non-security URIs line of /etc/apt/sources.list.d/debian.sources) into
#   DEST, through a separate apt configuration under SCRATCH (its own sources dir, lists and
#   cache, removed afterwards). The system's apt configuration is never touched and no
#   package host is named. Callers check the downloaded files' sha256 themselves.
apt_side_download() {
  local suite="$1" scratch="$2" dest="$3"
  shift 3
  local mirror
  mirror="$(awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)"
  if [[ -z "$mirror" ]]; then
    printf 'apt_side_download: no Debian mirror in /etc/apt/sources.list.d/debian.sources\n' >&2
    return 1
  fi
  rm -rf "$scratch"
  mkdir -p "$scratch/sources.list.d" "$scratch/preferences.d" "$scratch/lists/partial" "$scratch/cache/archives/partial"
  : >"$scratch/status"
  printf 'Types: deb\nURIs: %s\nSuites: %s\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
    "$mirror" "$suite" >"$scratch/sources.list.d/side.sources"
  local opts=(-o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$scratch/sources.list.d"
    -o "Dir::Etc::Preferences=/dev/null" -o "Dir::Etc::PreferencesParts=$scratch/preferences.d"
    -o "Dir::State::Lists=$scratch/lists" -o "Dir::Cache=$scratch/cache" -o "Dir::State::status=$scratch/status")
  apt-get "${opts[@]}" update -qq
  (cd "$dest" && apt-get "${opts[@]}" download -qq "$@" 2>&1 | grep -v 'unsandboxed as root' || true)
  rm -rf "$scratch"
}
