# Shared by the build.sh scripts under go/: checks that the go on PATH can
# build the module in the current directory, and fetches its modules with
# errors reported by module name. Source it; it defines die, out_dir,
# go_enter, go_module_build, go_line_build, go_check, go_required and
# go_fetch.

die() {
	echo "build.sh: error: $*" >&2
	exit 1
}

# out_dir DIR: DIR created, printed as an absolute path.
out_dir() {
	mkdir -p "$1" || die "cannot create output directory $1"
	(cd "$1" && pwd)
}

# go_enter MODDIR WHAT: into the module's directory, for a static build
# with a go that can build WHAT.
go_enter() {
	cd "$1" || die "no module directory $1"
	export CGO_ENABLED=0
	go_check "$2"
}

# go_module_build WHAT ARGS...: the start of a build.sh of one module,
# called with the script's arguments (OUTDIR): $out is OUTDIR, created and
# absolute, and the shell is in the script's directory, with a go that can
# build WHAT.
go_module_build() {
	local what=$1
	shift
	[[ $# -eq 1 ]] || die "usage: build.sh OUTDIR"
	out=$(out_dir "$1")
	go_enter "$(cd "$(dirname "${BASH_SOURCE[1]}")" && pwd)" "$what"
}

# go_line_build WHAT ARGS...: the start of a build.sh with a module per
# release line in vMINOR/, called with the script's arguments (MINOR
# OUTDIR): $minor is MINOR, $out is OUTDIR, created and absolute, and the
# shell is in vMINOR/, with a go that can build it.
go_line_build() {
	local what=$1 here
	shift
	here=$(cd "$(dirname "${BASH_SOURCE[1]}")" && pwd)
	[[ $# -eq 2 ]] || die "usage: build.sh MINOR OUTDIR (MINOR is one of: $(cd "$here" && ls -d v*/ | tr -d v/ | tr '\n' ' '))"
	minor=${1#v}
	[[ -f $here/v$minor/go.mod ]] || die "no module for $what $minor: $here/v$minor/go.mod is missing"
	out=$(out_dir "$2")
	go_enter "$here/v$minor" "$what $minor"
}

# go_check WHAT: the go on PATH is at least the version ./go.mod asks for.
go_check() {
	local what=$1 need have
	command -v go >/dev/null 2>&1 ||
		die "'go' is not on PATH: install Go 1.26 or newer (e.g. /usr/local/go/bin) and retry"
	need=$(awk '$1 == "go" { print $2; exit }' go.mod)
	have=$(go env GOVERSION 2>&1) || die "'go env GOVERSION' failed in $PWD: $have"
	have=${have#go}
	if [[ $(printf '%s\n%s\n' "$need" "$have" | sort -V | head -1) != "$need" ]]; then
		die "$what needs go >= $need, but go on PATH is $have (GOTOOLCHAIN=$(go env GOTOOLCHAIN)): put a newer go on PATH or export GOTOOLCHAIN=go$need or newer (served by the Go module proxy)"
	fi
}

# go_required MODULE: the version ./go.mod requires of MODULE.
go_required() {
	awk -v m="$1" '$1 == "require" && $2 == m { print $3 } $1 == m { print $2 }' go.mod | head -1
}

# go_fetch WHAT: every module of ./go.mod downloaded first, so a proxy
# failure names the module and version it refused.
go_fetch() {
	local what=$1 log failed n
	log=$(mktemp)
	if ! go mod download -json >"$log" 2>&1; then
		failed=$(awk -F'"' '
			/"Path":/    { p = $4 }
			/"Version":/ { v = $4 }
			/"Error":/   { e = $0; sub(/^[^:]*: "/, "", e); sub(/",?$/, "", e); print p "@" v ": " e }
		' "$log")
		[[ -n $failed ]] || failed=$(grep -v '^[[:space:]{}]' "$log")
		rm -f "$log"
		n=$(printf '%s\n' "$failed" | wc -l)
		failed=$(printf '%s\n' "$failed" | head -5)
		((n <= 5)) || failed+=$'\n'"(and $((n - 5)) more)"
		die "fetching the modules of $what failed (GOPROXY=$(go env GOPROXY)):
$failed"
	fi
	rm -f "$log"
}
