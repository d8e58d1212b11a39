# Sourced by the install scripts. `private_apt DIR SUITE` prepares an apt
# configuration of its own in DIR that reads Debian's SUITE only — the
# system's sources and state are neither read nor changed — fetches its
# package lists, and leaves the options in the array `apt_opts`, for
# `apt-get "${apt_opts[@]}" download PACKAGE` run in DIR/archives.
private_apt() {
  local dir=$1 suite=$2
  mkdir -p "$dir/lists/partial" "$dir/archives/partial"
  echo "deb http://deb.debian.org/debian $suite main" > "$dir/sources.list"
  apt_opts=(
    -o "Dir::Etc::SourceList=$dir/sources.list"
    -o "Dir::Etc::SourceParts=-"
    -o "Dir::State::Lists=$dir/lists"
    -o "Dir::Cache::Archives=$dir/archives"
    -o "Debug::NoLocking=1"
    -o "APT::Sandbox::User=root"
  )
  apt-get "${apt_opts[@]}" update -qq
}
