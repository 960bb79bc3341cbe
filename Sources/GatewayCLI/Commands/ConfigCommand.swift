import Gateway
import GatewayCore
import Support

enum ConfigCommand: GatewayCommand {
    static let name = "config"
    static let abstract = "Validate the config file (config check [PATH])"
    static let help = """
    usage: glucose-gateway config check [PATH]

    Reads the config file (PATH, else --config, else $GLUCOSE_GATEWAY_CONFIG, else
    \(GatewayConfig.defaultPath)) and reports every problem as PATH:LINE: message on stderr.
    When the file is valid, prints the effective settings; secrets show only as (set).

    Exit status: 0 valid, 78 any problem (including a missing file), 64 bad command line.
    """
    static let options = OptionTable.none

    static func run(_ arguments: inout Arguments, context: CommandContext) async throws -> ExitStatus {
        guard let action = arguments.positional() else {
            throw GatewayFailure(.usage, "missing action (usage: glucose-gateway config check [PATH])")
        }
        guard action == "check" else {
            throw GatewayFailure(.usage, "unknown action '\(action)' (usage: glucose-gateway config check [PATH])")
        }
        let positional = arguments.positional()
        try arguments.finish()
        let path = positional ?? context.configPath ?? GatewayConfig.defaultPath
        let (config, problems) = ConfigLoader.evaluate(path: path)
        if problems.isEmpty {
            var text = "\(path): ok\n"
            for line in config.summaryLines() {
                let shown = TerminalText.escaped(line)
                text += line.hasPrefix("[") ? shown + "\n" : "  " + shown + "\n"
            }
            for warning in ConfigLoader.warnings(for: config) {
                text += "warning: \(TerminalText.escaped(warning))\n"
            }
            if !config.hasDestination {
                text += "note: no upload destination is enabled; readings are stored locally only\n"
            }
            StandardStream.writeOutput(text)
            return .ok
        }
        var text = ""
        for problem in problems {
            let location = problem.line > 0 ? "\(path):\(problem.line)" : path
            text += "\(location): \(GatewayMain.oneLine(problem.message))\n"
        }
        text += "\(path): \(problems.count) problem\(problems.count == 1 ? "" : "s")\n"
        StandardStream.writeError(text)
        return .config
    }
}
