#if canImport(Glibc)
import Glibc
#endif
import GatewayCLI

// One malloc arena for the whole process, set before any thread starts: glibc otherwise gives each thread
// that allocates an arena of its own, and a sync's dispatch threads leave about 0.8 MB more resident
// memory that way (README, "How the gateway compares with a Python peer"). The threads rarely allocate at once.
#if canImport(Glibc)
// <malloc.h> is not part of the Glibc module: mallopt is looked up, M_ARENA_MAX is -8 there.
if let mallopt = dlsym(nil, "mallopt") {
    _ = unsafeBitCast(mallopt, to: (@convention(c) (Int32, Int32) -> Int32).self)(-8, 1)
}
#endif

// No logic here: the command line lives in GatewayCLI.
let status = await GatewayMain.main(Array(CommandLine.arguments.dropFirst()), environment: ProcessEnvironment.current())
exit(status)
