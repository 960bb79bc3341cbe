import GatewayCore
import Support
import Transport

/// `[network]`: retries, timeouts and recovery, shared by every destination.
public struct NetworkSection: Sendable, Equatable {
    public static let name = "network"
    public static let keys = ["retry_count", "network_timeout_ms", "health_check_url", "recovery_mode", "error_bypass", "on_network_error"]

    /// Retries of one upload before it waits for the next round.
    public var retryCount: Int = RecoverySettings.defaultRetryCount
    public var networkTimeoutMilliseconds: Int = RecoverySettings.defaultNetworkTimeoutMs
    /// Probed to tell "network down" from "server down"; never an upload server.
    public var healthCheckURL: String?
    /// Replay the outbox automatically when connectivity returns.
    public var recoveryMode: Bool = RecoverySettings.defaultRecoveryMode
    /// Skip (quarantine) an upload the server keeps refusing instead of blocking the queue behind it.
    public var errorBypass: Bool = RecoverySettings.defaultErrorBypass
    /// Program and arguments run on each new network error (the code and message in its environment); nil: none.
    public var onNetworkError: [String]?

    public init() {}

    /// `uploadURLs` are the destinations' URLs (key and value), which `health_check_url` must not point at.
    public init(section s: inout ConfigSection, uploadURLs: [(key: String, url: String?)]) {
        if let v = s.integer("retry_count", in: RecoverySettings.retryCountRange) { retryCount = v.value }
        if let v = s.integer("network_timeout_ms", in: RecoverySettings.networkTimeoutRange) { networkTimeoutMilliseconds = v.value }
        if let v = s.httpURL("health_check_url") {
            if let clash = uploadURLs.first(where: { $0.url.flatMap { HTTPURL($0)?.origin } == v.value.origin }) {
                s.problem(v.line, "network.health_check_url: must not point at an upload server (same scheme, host and port as \(clash.key)); use a host that tells whether the network is up")
            } else {
                healthCheckURL = v.value.text
            }
        }
        if let v = s.bool("recovery_mode") { recoveryMode = v.value }
        if let v = s.bool("error_bypass") { errorBypass = v.value }
        if let command = s.command("on_network_error") { onNetworkError = command }
    }

    /// What the dispatchers run with.
    public var recovery: RecoverySettings {
        RecoverySettings(retryCount: retryCount, networkTimeoutMs: networkTimeoutMilliseconds, healthCheckURL: healthCheckURL,
                         recoveryMode: recoveryMode, errorBypass: errorBypass, onNetworkError: onNetworkError.map(ShellWords.command))
    }

    public var summaryLines: [String] {
        ["[network]", "retry_count: \(retryCount)", "network_timeout_ms: \(networkTimeoutMilliseconds)",
         "health_check_url: \(healthCheckURL ?? "(not set)")", "recovery_mode: \(recoveryMode)", "error_bypass: \(errorBypass)",
         // Only the program: its arguments may carry a token or a phone number.
         "on_network_error: \(onNetworkError.map(ShellWords.describe) ?? "(not set)")"]
    }
}

extension UploadSettings {
    /// The enabled destinations of the upload sections, with the `[network]` recovery settings.
    public init(nightscout: NightscoutSection, fhir: FHIRSection, mqtt: MQTTSection, network: NetworkSection) {
        self.init(recovery: network.recovery, nightscout: nightscout.settings, fhir: fhir.settings, mqtt: mqtt.settings)
    }
}

/// A command line from the config (`on_network_error`, `on_meter_error`) as `/bin/sh -c` runs it.
public enum ShellWords {
    /// Each word in single quotes (a single quote inside becomes '\''), joined by spaces.
    public static func command(_ words: [String]) -> String {
        words.map(quote).joined(separator: " ")
    }

    static func quote(_ word: String) -> String {
        let safe = !word.isEmpty && word.unicodeScalars.allSatisfy {
            $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || "/._-+=:,@".unicodeScalars.contains($0))
        }
        if safe { return word }
        var out = "'"
        for ch in word {
            if ch == "'" { out += "'\\''" } else { out.append(ch) }
        }
        return out + "'"
    }

    /// `PROGRAM (N arguments)`: how a command line is shown (its arguments may carry a token).
    public static func describe(_ words: [String]) -> String {
        guard let program = words.first else { return "(empty)" }
        let n = words.count - 1
        return n == 0 ? program : "\(program) (\(n) argument\(n == 1 ? "" : "s"))"
    }
}
