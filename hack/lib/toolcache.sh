# shellcheck shell=bash
# The record that a cached tools folder (hack/toolchain.sh, hack/realnode-tools.sh,
# hack/realnode-images.sh) still holds what its build wrote, sourced by those
# scripts (and by test/realdb's TestToolCacheRecord).
#
# A build ends with toolcache_seal: the folder's SHA256SUMS lists the SHA-256 of
# every file in it (`sha256sum --binary` format, so `sha256sum --check
# SHA256SUMS` in the folder checks it by hand). Each reuse runs toolcache_verify
# first: a folder whose files are not exactly the ones listed, with the same
# hashes, is not run (root runs these binaries) but rebuilt. The record sits in
# the folder it describes: it catches a corrupted, truncated, replaced or added
# file, not someone who can write the folder and rewrite the record too.
#
# The hashes come from openssl when it is installed (it uses the CPU's SHA
# instructions: about half a second for the 500 MB of the control-plane
# binaries on 2 loaded cores, where sha256sum takes over 3 s), else from
# sha256sum; both print the same lines.

toolcache_manifest=SHA256SUMS
# The stat stamp of the last full check (see toolcache_verify).
toolcache_stamp=.verified

# _toolcache_files prints the paths of the entries of folder $1 (relative,
# sorted bytewise), other than folders and the record itself. It fails when one
# is not a regular file or has a name a record line could not hold plainly.
_toolcache_files() {
	local f
	(cd "$1" && find . -mindepth 1 ! -type d ! -path "./$toolcache_manifest" ! -path "./$toolcache_stamp" ! -path "./$toolcache_stamp.tmp.*" -print) | sed 's|^\./||' | LC_ALL=C sort |
		while IFS= read -r f; do
			[[ $f =~ ^[A-Za-z0-9._+-][A-Za-z0-9._+/-]*$ ]] && [ -f "$1/$f" ] && [ ! -L "$1/$f" ] || return 1
			printf '%s\n' "$f"
		done
}

# _toolcache_sums prints the record lines of the files of folder $1.
_toolcache_sums() {
	local files out line i=0
	files=$(_toolcache_files "$1") || return 1
	[ -n "$files" ] || return 1
	mapfile -t files <<<"$files"
	if command -v openssl >/dev/null 2>&1 && out=$(cd "$1" && openssl dgst -sha256 -r "${files[@]}" 2>/dev/null); then
		# Only lines in sha256sum's own format, one per file in order, count.
		while IFS= read -r line; do
			[ "$i" -lt "${#files[@]}" ] && [[ $line =~ ^[0-9a-f]{64}\ \*(.*)$ ]] && [ "${BASH_REMATCH[1]}" = "${files[i]}" ] || break
			i=$((i + 1))
		done <<<"$out"
		if [ "$i" -eq "${#files[@]}" ] && [ "$(wc -l <<<"$out")" -eq "$i" ]; then
			printf '%s\n' "$out"
			return 0
		fi
	fi
	(cd "$1" && sha256sum --binary -- "${files[@]}")
}

# toolcache_seal records the files of folder $1, a build's last step: the
# record is written to a temporary file and renamed into place, so a folder
# has either no record or a whole one.
toolcache_seal() {
	local sums tmp="$1/.$toolcache_manifest.tmp.$$"
	# Hashed before the temporary file exists: it is no file of the folder.
	sums=$(_toolcache_sums "$1") || { echo "toolcache: cannot record the hashes of the files of $1" >&2; return 1; }
	printf '%s\n' "$sums" >"$tmp"
	mv -f "$tmp" "$1/$toolcache_manifest"
}

# _toolcache_stat prints name, size, inode, modification and change time of
# every entry of folder $1 but the stamp. A file's change time (ctime) moves
# with every write, rename into place or change of its mode or owner, and no
# call sets it back.
_toolcache_stat() {
	(cd "$1" && find . -mindepth 1 ! -path "./$toolcache_stamp" ! -path "./$toolcache_stamp.tmp.*" -printf '%P %s %i %T@ %C@ %y\n') | LC_ALL=C sort
}

# toolcache_verify succeeds when folder $1 holds exactly the files its record
# lists, with the recorded hashes; it returns 2 when there is no record, 1
# when the files do not match it. These scripts run many times per test run,
# and hashing every file costs up to a second each time: a full check that
# passes leaves a stamp of the folder's entries (_toolcache_stat), and a
# folder whose entries still stat exactly as stamped is not hashed again.
# Anything written to the folder since, or a file replaced, changes the
# stamp's change times and brings the full check back.
toolcache_verify() {
	local got now
	[ -f "$1/$toolcache_manifest" ] && [ ! -L "$1/$toolcache_manifest" ] || return 2
	now=$(_toolcache_stat "$1") || return 1
	if [ -f "$1/$toolcache_stamp" ] && [ "$now" = "$(cat "$1/$toolcache_stamp")" ]; then
		return 0
	fi
	got=$(_toolcache_sums "$1") || return 1
	[ "$got" = "$(cat "$1/$toolcache_manifest")" ] || return 1
	# A folder the caller cannot write (another user's cache) is checked in
	# full every time.
	printf '%s\n' "$now" >"$1/$toolcache_stamp.tmp.$$" 2>/dev/null &&
		mv -f "$1/$toolcache_stamp.tmp.$$" "$1/$toolcache_stamp" 2>/dev/null || rm -f "$1/$toolcache_stamp.tmp.$$" 2>/dev/null
	return 0
}

# toolcache_trusted is toolcache_verify saying on standard error, as $1 (the
# script's name), why an existing folder $2 is rebuilt.
toolcache_trusted() {
	local rc=0
	toolcache_verify "$2" || rc=$?
	case $rc in
	0) return 0 ;;
	2)
		# Folders built before the scripts kept a record have none: each is
		# rebuilt once.
		[ ! -e "$2" ] || echo "$1: cached $2 has no record of the hashes of its files (built before they were recorded): rebuilding" >&2
		;;
	*) echo "$1: cached $2 does not match the hashes recorded when it was built: rebuilding" >&2 ;;
	esac
	return 1
}

# toolcache_remove removes $2, which must be a folder (or a leftover file or
# link) named directly in the tools parent folder $1, the only paths these
# scripts remove: anything else is refused.
toolcache_remove() {
	local parent=$1 path=$2 name
	name=${path#"$parent"/}
	if [ -z "$parent" ] || [ "$parent" = / ] || [ "$path" != "$parent/$name" ] ||
		! [[ $name =~ ^[A-Za-z0-9][A-Za-z0-9._+-]*$ ]]; then
		echo "toolcache: refusing to remove $path: not a folder of the tools cache $parent" >&2
		return 1
	fi
	rm -rf -- "$path"
}
