#if canImport(Glibc)
import Glibc
#endif
import GatewayCLI
import Support

// One malloc arena for the whole process, set before any thread starts: glibc otherwise gives each thread
// that allocates an arena of its own, and a sync's dispatch threads leave about 0.8 MB more resident
// memory and 3 % more CPU that way (docs/performance.md, "The performance code, piece by piece"). The
// threads rarely allocate at once.
#if canImport(Glibc)
// <malloc.h> is not part of the Glibc module: mallopt is looked up, M_ARENA_MAX is -8 there.
if let mallopt = dlsym(nil, "mallopt") {
    _ = unsafeBitCast(mallopt, to: (@convention(c) (Int32, Int32) -> Int32).self)(-8, 1)
}
#endif

// No logic here: the command line lives in GatewayCLI, the start-up (signals, the waiting thread) in
// `Program.run`.
Program.run { arguments, environment in await GatewayMain.main(arguments, environment: environment) }
