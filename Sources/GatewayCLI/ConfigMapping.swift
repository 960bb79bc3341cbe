import Gateway
import Support
import SyncEngine
import Transport

extension GatewayConfig {
    /// The upload engine's settings from the config: one entry per enabled destination, and the
    /// `[network]` recovery settings. A disabled or incomplete destination maps to nil (the loader has
    /// already refused an enabled one that lacks its URL or credential).
    public var uploadSettings: UploadSettings {
        let recovery = RecoverySettings(
            retryCount: network.retryCount,
            networkTimeoutMs: network.networkTimeoutMilliseconds,
            healthCheckURL: network.healthCheckURL,
            recoveryMode: network.recoveryMode,
            errorBypass: network.errorBypass,
            onNetworkError: network.onNetworkError.map(ShellWords.command)
        )
        var ns: SyncEngine.NightscoutSettings?
        if nightscout.enabled, let url = nightscout.url {
            var settings = SyncEngine.NightscoutSettings(url: url, caFile: nightscout.caFile, treatments: nightscout.treatments,
                                                         units: nightscout.units == .mmol ? .mmol : .mgdl,
                                                         outOfRangeNotes: nightscout.outOfRangeNotes)
            settings.api = SyncEngine.NightscoutAPI(rawValue: nightscout.api) ?? .v1
            switch nightscout.credential {
            case .apiSecret(let s): settings.apiSecret = Support.Secret(s.value)
            case .token(let s): settings.token = Support.Secret(s.value)
            case nil: break
            }
            ns = settings
        }
        var fhirSettings: SyncEngine.FHIRSettings?
        if fhir.enabled, let base = fhir.baseURL, let subject = fhir.subject {
            fhirSettings = SyncEngine.FHIRSettings(
                baseURL: base, subject: subject, token: fhir.bearerToken.map { Support.Secret($0.value) }, caFile: fhir.caFile
            )
        }
        var mqttSettings: SyncEngine.MQTTSettings?
        if mqtt.enabled, let host = mqtt.host, let port = mqtt.port {
            let broker = MQTTBrokerSettings(host: host, port: port, tls: mqtt.tls, username: mqtt.username,
                                            password: mqtt.password.map { Support.Secret($0.value) }, caFile: mqtt.caFile)
            mqttSettings = SyncEngine.MQTTSettings(broker: broker, topicPrefix: mqtt.topicPrefix, discovery: mqtt.discovery)
        }
        return UploadSettings(recovery: recovery, nightscout: ns, fhir: fhirSettings, mqtt: mqttSettings)
    }
}

/// Quoting for `/bin/sh -c`, which is how the upload engine runs `on_network_error`.
enum ShellWords {
    /// Each word in single quotes (a single quote inside becomes '\''), joined by spaces.
    static func command(_ words: [String]) -> String {
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
}
