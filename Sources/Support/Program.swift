#if canImport(Glibc)
import Glibc
#endif
import Dispatch

/// How the package's programs (the gateway and the meter simulator) start and end.
public enum Program {
    /// Runs `main` with the command line (without the program's name) and the environment, and exits the
    /// process with the status it returns. Never returns.
    ///
    /// `main` runs as a task on the concurrency pool while this thread waits. An asynchronous top-level
    /// `main` would end this thread with pthread_exit (dispatch_main), which unwinds its stack through the
    /// unwind tables: half a megabyte of them read into memory for nothing (docs/performance.md, "What the
    /// package's build flags do"). The waiting thread blocks every signal first, as dispatch's own threads
    /// do, so a signal the program handles (through `ProcessSignals`) is never taken by a thread that
    /// ignores it. All but SIGABRT: systemd's watchdog sends it to a daemon that stopped pinging, and its
    /// default action (end the process with a core dump for the journal) has to happen. Every thread
    /// started later inherits this mask, and dispatch's own threads block SIGABRT, so this waiting thread
    /// is the one that takes it; the runtime's crash handler, which expects to run on the thread that
    /// crashed, is not the one to act on it here.
    public static func run(_ main: @escaping @Sendable (_ arguments: [String], _ environment: [String: String]) async -> Int32) -> Never {
        var everySignal = sigset_t()
        sigfillset(&everySignal)
        sigdelset(&everySignal, SIGABRT)
        pthread_sigmask(SIG_BLOCK, &everySignal, nil)
        signal(SIGABRT, SIG_DFL)
        Task.detached {
            exit(await main(Array(CommandLine.arguments.dropFirst()), ProcessEnvironment.current()))
        }
        while true {
            DispatchSemaphore(value: 0).wait()
        }
    }

    /// The status to exit with once a command returned `status`. Standard output is flushed; a failed
    /// write to it (a full disk, `/dev/full`) is reported in one line on standard error, after `name`
    /// ("glucose-gateway sync"), and it and a failed write to standard error turn success into 1. A
    /// command that failed already keeps its own, more precise status.
    public static func exitStatus(_ status: Int32, name: String) -> Int32 {
        StandardStream.flush()
        if let code = StandardStream.outputFailure {
            StandardStream.writeError("\(name): cannot write to standard output: \(StandardStream.describe(code))\n")
        }
        let streamFailed = StandardStream.outputFailure != nil || StandardStream.errorFailure != nil
        if status == ExitStatus.ok.rawValue, streamFailed { return ExitStatus.failure.rawValue }
        return status
    }
}
