import Gateway
import GatewayCore
import Support

extension CommandContext {
    /// The configuration this command runs with (exit 78 on any problem). `--config` or
    /// `GLUCOSE_GATEWAY_CONFIG` must name an existing file; without either, a missing default file means
    /// built-in defaults (no upload destination), unless `requireFile` is set.
    public func loadConfig(requireFile: Bool = false) throws(GatewayFailure) -> GatewayConfig {
        try ConfigLoader.load(explicitPath: configPath, requireFile: requireFile)
    }

    /// The configuration of a meter command (`pair`, `scan`, `unpair`, `meters`, `readings`, `status`):
    /// a problem in `[nightscout]`, `[fhir]` or `[network]` does not stop it. That section is left at its
    /// defaults and one warning line naming the problem goes to stderr; any other problem is exit 78.
    public func loadConfig(forMeterCommand command: String) throws(GatewayFailure) -> GatewayConfig {
        let (config, warning) = try ConfigLoader.loadIgnoringUploadProblems(explicitPath: configPath)
        if let warning {
            StandardStream.writeError("glucose-gateway \(command): warning: \(GatewayMain.oneLine(warning))\n")
        }
        return config
    }
}

extension CommandContext {
    /// The command's logger at the config's `log_level`; `--verbose` (debug) wins over the config.
    public func logger(for config: GatewayConfig) -> Logger {
        var copy = logger
        if copy.minimumLevel != .debug { copy.minimumLevel = config.gateway.logLevel }
        return copy
    }
}
