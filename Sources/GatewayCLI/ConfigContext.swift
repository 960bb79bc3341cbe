import Gateway
import GatewayCore

extension CommandContext {
    /// The configuration this command runs with (exit 78 on any problem). `--config` or
    /// `GLUCOSE_GATEWAY_CONFIG` must name an existing file; without either, a missing default file means
    /// built-in defaults (no upload destination), unless `requireFile` is set.
    public func loadConfig(requireFile: Bool = false) throws(GatewayFailure) -> GatewayConfig {
        try ConfigLoader.load(explicitPath: configPath, requireFile: requireFile)
    }
}
