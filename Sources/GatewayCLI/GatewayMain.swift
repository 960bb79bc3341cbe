#if canImport(Glibc)
import Glibc
#endif
import GatewayCore

/// The whole command line: global options, subcommand dispatch, help, and exit statuses.
public enum GatewayMain {
    public static let usage = """
    usage: glucose-gateway [--config PATH] COMMAND [ARGS...]

    A headless gateway for Bluetooth LE blood-glucose meters: pairs once, downloads every reading,
    stores it durably in SQLite and uploads it to Nightscout or a FHIR R4 server.

    Global options:
      --config PATH   config file (else $GLUCOSE_GATEWAY_CONFIG, else /etc/glucose-gateway/glucose-gateway.toml)
      --verbose       log debug messages
      --help          this text; COMMAND --help for a command's own

    Commands:
    """

    public static func helpText() -> String {
        var text = usage + "\n"
        for command in allCommands {
            let pad = String(repeating: " ", count: max(1, 16 - command.name.count))
            text += "  \(command.name)\(pad)\(command.abstract)\n"
        }
        text += "\nExit status: 0 ok, 1 failure, 64 usage, 65 malformed data, 69 meter or adapter unavailable,\n"
        text += "75 readings stored but upload deferred, 78 configuration error.\n"
        return text
    }

    /// Runs the command line and returns the exit status; prints one-line errors to stderr.
    public static func main(_ argv: [String], environment: [String: String]) async -> Int32 {
        var args = Arguments(argv)
        let configOption: String?
        do {
            configOption = try args.option("--config")
        } catch {
            return fail(error)
        }
        let verbose = args.flag("--verbose")
        guard let name = args.positional() else {
            if args.flag("--help") || args.flag("-h") {
                print(helpText(), terminator: "")
                return ExitStatus.ok.rawValue
            }
            StandardStream.writeError(helpText())
            return ExitStatus.usage.rawValue
        }
        if name == "help" {
            print(helpText(), terminator: "")
            return ExitStatus.ok.rawValue
        }
        guard let command = allCommands.first(where: { $0.name == name }) else {
            StandardStream.writeError("glucose-gateway: unknown command '\(name)' (see glucose-gateway --help)\n")
            return ExitStatus.usage.rawValue
        }
        if args.flag("--help") || args.flag("-h") {
            print(command.help)
            return ExitStatus.ok.rawValue
        }
        let level: LogLevel = verbose ? .debug : .info
        let journal = environment["JOURNAL_STREAM"] != nil || environment["INVOCATION_ID"] != nil
        let logger = Logger(label: "glucose-gateway", minimumLevel: level, sink: StderrLogSink(journalPrefix: journal))
        let context = CommandContext(
            configPath: configOption ?? environment["GLUCOSE_GATEWAY_CONFIG"],
            environment: environment,
            logger: logger
        )
        do {
            return try await command.run(&args, context: context).rawValue
        } catch {
            return fail(error, command: command.name)
        }
    }

    static func fail(_ error: any Error, command: String? = nil) -> Int32 {
        let prefix = command.map { "glucose-gateway \($0): " } ?? "glucose-gateway: "
        if let failure = error as? GatewayFailure {
            StandardStream.writeError(prefix + oneLine(failure.message) + "\n")
            return failure.status.rawValue
        }
        StandardStream.writeError(prefix + oneLine(String(describing: error)) + "\n")
        return ExitStatus.failure.rawValue
    }

    static func oneLine(_ text: String) -> String {
        String(text.map { $0 == "\n" || $0 == "\r" ? " " : $0 })
    }
}
