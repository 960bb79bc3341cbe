# Sourced by scripts/package-deb.sh and scripts/bench/sync-vs-peer.sh (and scripts/bench/text-order.sh), so
# the benchmark measures the gateway exactly as the package builds it. Needs $here (the repository),
# $build_dir (the scratch path) and the toolchain's clang on PATH; sets package_flags for `swift build`.
# See docs/performance.md, "How the gateway compares with a Python peer", for what each flag saves.
#   --static-swift-stdlib            the Swift runtime linked in: the package needs no toolchain
#   --disable-local-rpath            no $ORIGIN search path
#   -z now                           immediate binding: a fully read-only relocation table
#   lld, pack-relative-relocs        DT_RELR: the runtime's 31,000 relative relocations in 6 KiB, not 750 KiB
#   --no-export-dynamic              the runtime's link options export every symbol of the program; nothing
#                                    looks them up, and their tables (600 KiB) were read at every start
#   libstdc++ linked in              the runtime uses a few of its string and tree functions; the shared
#                                    library is 1 MB resident and 1,700 relocations at every start. lld takes
#                                    the first libstdc++ on the search path: a directory with only the
#                                    archive (libstdc++-12-dev, which linking needs anyway) goes first.
#   function sections, ordered       each function in a section of its own; those a sync with upload, pair,
#                                    status and --help run come first in .text, in the order of
#                                    packaging/text-order.txt (scripts/bench/text-order.sh writes it), and the
#                                    compiler's local helpers together (packaging/text-order.ld): the kernel
#                                    maps 64 KiB around each page touched, so packed hot code keeps 3 MB less
#                                    of the program resident
#   metadata by accessor calls       the compiler refers to a generic type it knows (an array of a struct,
#                                    a dictionary, a stream of events) through calls that build its
#                                    metadata, not through its mangled name, which the runtime demangled at
#                                    the first use of each: 2.9 of the 20 million instructions of a
#                                    10-record sync
cxx_archive="$(clang -print-file-name=libstdc++.a)"
if [[ "$cxx_archive" != /* ]]; then
    echo "package-flags.sh: no libstdc++.a (install libstdc++-12-dev)" >&2
    exit 69
fi
mkdir -p "$build_dir/static-libstdc++"
ln -sfn "$cxx_archive" "$build_dir/static-libstdc++/libstdc++.a"
package_flags=(-c release --product glucose-gateway --static-swift-stdlib --disable-local-rpath
               -Xlinker -z -Xlinker now -Xswiftc -use-ld=lld -Xlinker -z -Xlinker pack-relative-relocs
               -Xlinker --no-export-dynamic -Xswiftc -Xclang-linker -Xswiftc "-L$build_dir/static-libstdc++"
               -Xswiftc -Xfrontend -Xswiftc -function-sections
               -Xswiftc -Xfrontend -Xswiftc -disable-concrete-type-metadata-mangled-name-accessors
               -Xlinker "--symbol-ordering-file=$here/packaging/text-order.txt" -Xlinker --no-warn-symbol-ordering
               -Xlinker -T -Xlinker "$here/packaging/text-order.ld" -Xlinker "-Map=$build_dir/glucose-gateway.map"
               -Xlinker --no-demangle
               --scratch-path "$build_dir" --package-path "$here")
# The linker map is for scripts/bench/text-order.sh (with the symbol names as the ordering file needs them,
# not demangled). swift build keeps its build plan, and the compiler
# driver rebuilds a module when its sources change, not when only these flags do: a plan and objects
# made with other flags are removed first. Nor is the program linked again when only the link order
# changes: a program older than packaging/text-order.* is removed.
release_dir="$(swift build "${package_flags[@]}" --show-bin-path)"
flags_stamp="$build_dir/package-flags.txt"
if [[ "$(cat "$flags_stamp" 2>/dev/null)" != "${package_flags[*]}" ]]; then
    [[ ! -d "$release_dir" ]] || rm -rf -- "$release_dir"
    rm -f -- "$build_dir/release.yaml"
    printf '%s\n' "${package_flags[*]}" > "$flags_stamp"
fi
for input in "$here"/packaging/text-order.{txt,ld}; do
    [[ ! "$input" -nt "$release_dir/glucose-gateway" ]] || rm -f -- "$release_dir/glucose-gateway"
done
