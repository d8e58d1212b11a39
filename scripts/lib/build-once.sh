# build_once DIR FILE SCRIPT [ARGS...]: `SCRIPT ARGS... DIR` (a build.sh
# under go/), unless DIR/FILE is there already; built aside and moved in
# whole, so an interrupted build is not taken for a finished one.
build_once() {
  local dir=$1 file=$2 script=$3
  shift 3
  [ -x "$dir/$file" ] && return 0
  rm -rf "$dir.partial"
  nice -n 10 bash "$script" "$@" "$dir.partial"
  rm -rf "$dir"
  mv "$dir.partial" "$dir"
}

# build_etcd_releases: etcd 3.6 and 3.7 from etcd's Go modules into the
# tools directory (DKV_TOOLS_DIR, default .tools), once.
build_etcd_releases() {
  local tools="${DKV_TOOLS_DIR:-$PWD/.tools}" release
  for release in 3.6:3.6.16 3.7:3.7.3; do
    build_once "$tools/etcd-${release#*:}/usr/bin" etcd go/etcd/build.sh "${release%%:*}"
  done
}
