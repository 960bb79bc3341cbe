#if canImport(Glibc)
import Glibc
#endif
import GatewayCore
import Support

/// The simulator's command line: help, the options, one-line errors and exit statuses, as the gateway's
/// commands give them.
enum SimulatorMain {
    static let program = "glucose-gateway-simulator"

    static func main(_ argv: [String], environment: [String: String]) async -> Int32 {
        Program.exitStatus(await dispatch(argv, environment: environment), name: program)
    }

    static func dispatch(_ argv: [String], environment: [String: String]) async -> Int32 {
        var arguments: Arguments
        do {
            arguments = try Arguments(parsing: argv, options: SimulatorCommand.options.merging(OptionTable(flags: ["--verbose"])))
        } catch {
            // `--help` wins over a mistake elsewhere on the line.
            if argv.prefix(while: { $0 != "--" }).contains(where: { $0 == "--help" || $0 == "-h" }) {
                StandardStream.writeOutput(SimulatorCommand.help + "\n")
                return ExitStatus.ok.rawValue
            }
            return fail(error)
        }
        if arguments.help {
            StandardStream.writeOutput(SimulatorCommand.help + "\n")
            return ExitStatus.ok.rawValue
        }
        let level: LogLevel = arguments.flag("--verbose") ? .debug : .info
        let journal = environment["JOURNAL_STREAM"] != nil || environment["INVOCATION_ID"] != nil
        let logger = Logger(label: "simulator", minimumLevel: level, sink: StderrLogSink(journalPrefix: journal))
        do {
            return try await SimulatorCommand.run(&arguments, environment: environment, logger: logger).rawValue
        } catch {
            return fail(error)
        }
    }

    static func fail(_ error: any Error) -> Int32 {
        if let failure = error as? GatewayFailure {
            StandardStream.writeError("\(program): " + TerminalText.escaped(failure.message) + "\n")
            return failure.status.rawValue
        }
        StandardStream.writeError("\(program): " + TerminalText.escaped(String(describing: error)) + "\n")
        return ExitStatus.failure.rawValue
    }
}
