# Sourced by scripts/package-deb.sh and scripts/bench/sync-vs-peer.sh (and scripts/bench/text-order.sh), so
# the benchmark measures the gateway exactly as the package builds it. Needs $here (the repository),
# $build_dir (the scratch path) and the toolchain's clang on PATH; sets package_flags for `swift build`.
# See README, "How the gateway compares with a Python peer", for what each flag saves.
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
               --scratch-path "$build_dir" --package-path "$here")
