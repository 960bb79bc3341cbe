import GatewayCore
import Support
import Transport

/// Recovery behaviour shared by every destination, from `[network]` (`NetworkSection`, which checks the
/// ranges below).
public struct RecoverySettings: Sendable, Equatable {
    /// `retry_count`: extra attempts within one upload session for transient or ambiguous outcomes.
    public static let retryCountRange: ClosedRange<Int> = 0...10
    public static let defaultRetryCount = 3
    /// `network_timeout_ms`: connect and response timeout of one request and of the health probe.
    public static let networkTimeoutRange: ClosedRange<Int> = 100...10_000
    public static let defaultNetworkTimeoutMs = 3000
    public static let defaultRecoveryMode = true
    public static let defaultErrorBypass = false

    public var retryCount: Int
    public var networkTimeoutMs: Int
    /// `health_check_url`: probed after a failure that is not an HTTP answer; not the upload server.
    public var healthCheckURL: String?
    /// `recovery_mode`: keep a session across a network drop and resume it when connectivity returns.
    public var recoveryMode: Bool
    /// `error_bypass`: quarantine a reading the server rejects permanently instead of blocking.
    public var errorBypass: Bool
    /// `on_network_error`: a command line run with `/bin/sh -c` on each new network error state, with
    /// `GATEWAY_ERROR_CODE`, `GATEWAY_ERROR_MESSAGE` and `GATEWAY_PENDING` in its environment.
    public var onNetworkError: String?

    public init(
        retryCount: Int = RecoverySettings.defaultRetryCount,
        networkTimeoutMs: Int = RecoverySettings.defaultNetworkTimeoutMs,
        healthCheckURL: String? = nil,
        recoveryMode: Bool = RecoverySettings.defaultRecoveryMode,
        errorBypass: Bool = RecoverySettings.defaultErrorBypass,
        onNetworkError: String? = nil
    ) {
        self.retryCount = retryCount
        self.networkTimeoutMs = networkTimeoutMs
        self.healthCheckURL = healthCheckURL
        self.recoveryMode = recoveryMode
        self.errorBypass = errorBypass
        self.onNetworkError = onNetworkError
    }

    /// One message per problem, naming the key.
}

/// `[nightscout] units`: the unit of `glucose` in BG Check treatments (entries are always mg/dL).
public enum NightscoutUnits: String, Sendable, Equatable, CaseIterable {
    case mgdl = "mg/dl"
    case mmol = "mmol"
}

/// A Nightscout destination as the uploader runs it (from `NightscoutSection`).
public struct NightscoutSettings: Sendable, Equatable {
    /// Site root, e.g. `https://example.org` (a path prefix is kept).
    public var url: String
    /// The API secret itself; the header carries its SHA-1 hex digest.
    public var apiSecret: Secret?
    /// An access token (a subject's token), sent in the same header instead of the secret.
    public var token: Secret?
    /// PEM bundle of a private CA, trusted instead of the system store (verification itself is always on).
    public var caFile: String?
    /// `api`: v1 (the default) or v3, which needs an access token (`token`).
    public var api: NightscoutAPI = .v1
    /// `treatments`: each uploadable reading is also a `BG Check` treatment (default off).
    public var treatments: Bool
    /// `units`: the unit of those treatments' `glucose`.
    public var units: NightscoutUnits
    /// `out_of_range_notes`: a HI or LO reading becomes a `Note` treatment without a number (default off).
    public var outOfRangeNotes: Bool
    /// `device_status`: the gateway's own `devicestatus` documents, how often; nil: none (the default).
    public var deviceStatus: DeviceStatusPolicy?

    public init(url: String, apiSecret: Secret? = nil, token: Secret? = nil, caFile: String? = nil, treatments: Bool = false,
                units: NightscoutUnits = .mgdl, outOfRangeNotes: Bool = false) {
        self.url = url
        self.apiSecret = apiSecret
        self.token = token
        self.caFile = caFile
        self.treatments = treatments
        self.units = units
        self.outOfRangeNotes = outOfRangeNotes
    }

    /// Something goes to `/api/v1/treatments`: its own destination, with its own outbox rows.
    public var sendsTreatments: Bool { treatments || outOfRangeNotes }


    /// The value of the `api-secret` header: SHA-1 hex of the secret, else the token as is.
    var authHeader: String? {
        if let secret = apiSecret { return SHA1.hex(secret.value.utf8) }
        return token?.value
    }
}

/// A FHIR destination as the uploader runs it (from `FHIRSection`).
public struct FHIRSettings: Sendable, Equatable {
    /// FHIR base, e.g. `https://fhir.example.org/fhir`.
    public var baseURL: String
    /// Reference to the patient, e.g. `Patient/123`.
    public var subject: String
    /// Optional bearer token.
    public var token: Secret?
    public var caFile: String?

    public init(baseURL: String, subject: String, token: Secret? = nil, caFile: String? = nil) {
        self.baseURL = baseURL
        self.subject = subject
        self.token = token
        self.caFile = caFile
    }

}

/// Everything the uploader needs from the config.
public struct UploadSettings: Sendable, Equatable {
    public var recovery: RecoverySettings
    public var nightscout: NightscoutSettings?
    public var fhir: FHIRSettings?
    public var mqtt: MQTTSettings?

    public init(recovery: RecoverySettings = RecoverySettings(), nightscout: NightscoutSettings? = nil, fhir: FHIRSettings? = nil,
                mqtt: MQTTSettings? = nil) {
        self.recovery = recovery
        self.nightscout = nightscout
        self.fhir = fhir
        self.mqtt = mqtt
    }

    /// The builders the store calls when it inserts a reading: one per enabled destination.
    public var bodyBuilders: [any OutboxBodyBuilder] {
        var builders: [any OutboxBodyBuilder] = []
        if let nightscout {
            builders.append(NightscoutBodyBuilder())
            if nightscout.sendsTreatments {
                builders.append(NightscoutTreatmentBuilder(bgChecks: nightscout.treatments, units: nightscout.units,
                                                           outOfRangeNotes: nightscout.outOfRangeNotes))
            }
        }
        if let fhir { builders.append(FHIRBodyBuilder(subject: fhir.subject)) }
        if mqtt != nil { builders.append(MQTTBodyBuilder()) }
        return builders
    }

    /// True when every enabled destination is on this host (`127.x`, `localhost`, `[::1]`), as the
    /// dispatchers judge it: what the system says about the network does not tell whether they can be
    /// reached, so a one-shot upload has no use for watching it.
    public var allDestinationsLocal: Bool {
        var origins: [String] = []
        if let nightscout { origins.append(HTTPURL(nightscout.url)?.origin ?? "?") }
        if let fhir { origins.append(HTTPURL(fhir.baseURL)?.origin ?? "?") }
        if let mqtt { origins.append(mqtt.broker.origin) }
        return !origins.isEmpty && origins.allSatisfy(Uploader.isLocal)
    }

    public var destinations: [DestinationName] {
        (nightscout != nil ? [.nightscout] : []) + (nightscout?.sendsTreatments == true ? [.nightscoutTreatments] : [])
            + (fhir != nil ? [.fhir] : []) + (mqtt != nil ? [.mqtt] : [])
    }

}
