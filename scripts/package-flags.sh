# Sourced by scripts/package-deb.sh and scripts/bench/sync-vs-peer.sh (and scripts/bench/text-order.sh), so
# the benchmark measures the gateway exactly as the package builds it. Needs $here (the repository) and
# $build_dir (the scratch path); sets package_flags for `swift build`. See README, "How the gateway
# compares with a Python peer", for what each flag saves.
#   --static-swift-stdlib            the Swift runtime linked in: the package needs no toolchain
#   --disable-local-rpath            no $ORIGIN search path
#   -z now                           immediate binding: a fully read-only relocation table
#   lld, pack-relative-relocs        DT_RELR: the runtime's 31,000 relative relocations in 6 KiB, not 750 KiB
#   --no-export-dynamic              the runtime's link options export every symbol of the program; nothing
#                                    looks them up, and their tables (600 KiB) were read at every start
package_flags=(-c release --product glucose-gateway --static-swift-stdlib --disable-local-rpath
               -Xlinker -z -Xlinker now -Xswiftc -use-ld=lld -Xlinker -z -Xlinker pack-relative-relocs
               -Xlinker --no-export-dynamic
               --scratch-path "$build_dir" --package-path "$here")
