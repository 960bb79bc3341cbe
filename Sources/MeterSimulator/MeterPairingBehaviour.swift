import GatewayCore

/// How a meter pairs: its pairing method (which follows from its SMP IO capability and whether it speaks
/// LE Secure Connections), whether it starts pairing itself, and how it answers.
///
/// Meter file: `"pairing": "just-works"`, or
/// `"pairing": {"method": "numeric-comparison", "startsPairing": true, "answer": "cancels"}`.
public struct MeterPairingBehaviour: Sendable, Equatable {
    public enum Method: String, Sendable, CaseIterable {
        /// LE Secure Connections passkey entry: the meter displays its PIN (IO capability DisplayOnly).
        case passkeyEntry = "passkey-entry"
        /// The same with legacy pairing (BLE 4.0/4.1 meters).
        case legacyPasskeyEntry = "legacy-passkey-entry"
        /// No display, no buttons (NoInputNoOutput): nothing is asked, no MITM protection.
        case justWorks = "just-works"
        /// A display and a yes/no button (DisplayYesNo) with LE Secure Connections.
        case numericComparison = "numeric-comparison"
    }

    /// What the meter does when asked to pair.
    public enum Answer: String, Sendable, CaseIterable {
        /// Pairs when the passkey or the confirmation is right.
        case completes
        /// Cancels: SMP Pairing Failed at once, or, under numeric comparison, after the gateway confirmed
        /// (No pressed on the meter).
        case cancels
        /// Never answers the Pairing Request: SMP's 30 s timeout ends it.
        case neverAnswers = "never-answers"
    }

    public var method: Method
    /// The meter sends an SMP Security Request as soon as a link is up, so pairing starts without `Pair`.
    public var startsPairing: Bool
    public var answer: Answer

    public init(method: Method = .passkeyEntry, startsPairing: Bool = false, answer: Answer = .completes) {
        self.method = method
        self.startsPairing = startsPairing
        self.answer = answer
    }

    /// The meter's SMP IO capability, in BlueZ's agent names.
    public var ioCapability: String {
        switch method {
        case .passkeyEntry, .legacyPasskeyEntry: "DisplayOnly"
        case .justWorks: "NoInputNoOutput"
        case .numericComparison: "DisplayYesNo"
        }
    }

    public var secureConnections: Bool { method != .legacyPasskeyEntry }

    /// The meter insists on MITM protection (it has a display to prove itself with).
    public var requiresMITM: Bool { method != .justWorks }

    /// What the two sides do, as the Bluetooth Core (Vol 3 Part H 2.3.5.1, Table 2.8) maps the
    /// initiator's IO capability (the adapter's, from the agent) and the responder's (the meter's).
    public enum Exchange: Sendable, Equatable {
        case justWorks
        /// The meter shows, the gateway types (`RequestPasskey`).
        case gatewayTypes
        /// The gateway shows, the meter's user types (`DisplayPasskey`).
        case gatewayShows
        /// Both type the same digits (`RequestPasskey`; the meter's user types the same).
        case bothType
        /// Both show six digits and both confirm (`RequestConfirmation`).
        case numericComparison
    }

    /// The exchange for an initiator with IO capability `gateway` (an agent capability name).
    public func exchange(gateway: String) -> Exchange {
        let meter = ioCapability
        switch (meter, gateway) {
        case ("NoInputNoOutput", _), (_, "NoInputNoOutput"), (_, "DisplayOnly"), ("DisplayOnly", "DisplayYesNo"):
            return .justWorks
        case ("DisplayOnly", _), ("DisplayYesNo", "KeyboardOnly"):
            return .gatewayTypes
        case ("DisplayYesNo", "DisplayYesNo"):
            return secureConnections ? .numericComparison : .justWorks
        case ("DisplayYesNo", _):
            // KeyboardDisplay: numeric comparison with LE Secure Connections, else the meter displays.
            return secureConnections ? .numericComparison : .gatewayTypes
        default:
            return .bothType
        }
    }
}
