#if canImport(Glibc)
import Glibc
#endif
import Dispatch
import GatewayCore

// The meter simulator, a program of its own so the gateway does not carry it: a test double for the
// system tests and the real-stack bed, and the meter of the demo. No logic here (see SimulatorMain).
// As in the gateway's main: the command runs as a task while this thread waits with every signal but
// SIGABRT blocked, so SIGINT and SIGTERM reach the dispatch signal sources of TerminationSignals.
#if canImport(Glibc)
var everySignal = sigset_t()
sigfillset(&everySignal)
sigdelset(&everySignal, SIGABRT)
pthread_sigmask(SIG_BLOCK, &everySignal, nil)
signal(SIGABRT, SIG_DFL)
#endif
Task.detached {
    exit(await SimulatorMain.main(Array(CommandLine.arguments.dropFirst()), environment: SimulatorMain.environment()))
}
while true {
    DispatchSemaphore(value: 0).wait()
}
