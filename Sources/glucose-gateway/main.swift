#if canImport(Glibc)
import Glibc
#endif
import Dispatch
import GatewayCLI

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

// No logic here: the command line lives in GatewayCLI. It runs as a task on the concurrency pool, which
// exits the process when it is done, while this thread waits. An asynchronous top-level `main` would end
// this thread with pthread_exit (dispatch_main), which unwinds its stack through the unwind tables: half a
// megabyte of them read into memory for nothing (docs/performance.md, "What the package's build flags do").
// The waiting thread blocks every signal first, as dispatch's own threads do, so a signal the commands
// handle (SIGTERM, SIGINT, SIGHUP through dispatch signal sources) is never taken by a thread that ignores it.
// All but SIGABRT: systemd's watchdog sends it to a daemon that stopped pinging, and its default action (end
// the process with a core dump for the journal) has to happen. Every thread started later inherits this mask,
// and dispatch's own threads block SIGABRT, so this waiting thread is the one that takes it; the runtime's
// crash handler, which expects to run on the thread that crashed, is not the one to act on it here.
#if canImport(Glibc)
var everySignal = sigset_t()
sigfillset(&everySignal)
sigdelset(&everySignal, SIGABRT)
pthread_sigmask(SIG_BLOCK, &everySignal, nil)
signal(SIGABRT, SIG_DFL)
#endif
Task.detached {
    exit(await GatewayMain.main(Array(CommandLine.arguments.dropFirst()), environment: ProcessEnvironment.current()))
}
while true {
    DispatchSemaphore(value: 0).wait()
}
