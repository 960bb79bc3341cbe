/// The pairing method a meter and the gateway arrived at (Core Vol 3 Part H 2.3.5.1). The two sides pick it
/// from their IO capabilities; the gateway learns which one it was from what its agent was asked.
/// LE Secure Connections and legacy pairing ask the same questions, so they are one method here.
public enum PairingMethod: String, Sendable, Equatable, CaseIterable {
    /// The meter displays six digits and the gateway types them (`--pin`).
    case passkeyEntry = "passkey entry"
    /// Both screens show six digits; the person confirms they match on the gateway and on the meter.
    case numericComparison = "numeric comparison"
    /// The gateway shows six digits and the person types them on the meter.
    case passkeyShown = "passkey entry on the meter"
    /// Nothing is asked: the link is encrypted, but nothing proves that the device paired is the meter.
    case justWorks = "Just Works"
}

/// What the person running `pair` brought: a PIN, and how the six digits of numeric comparison and a
/// passkey the meter wants typed reach a person. Holds the PIN: never log or print it.
public struct PairingInput: Sendable {
    /// The six digits the meter shows, or nil when none was given: a meter that asks for a passkey is
    /// then refused (never guessed).
    public var passkey: UInt32?
    /// Asks the person whether the meter shows these six digits (numeric comparison); true when they
    /// match. Nil when nobody can be asked: numeric comparison is then refused.
    public var confirmNumbers: (@Sendable (_ digits: UInt32) async -> Bool)?
    /// Shows six digits for the person to type on the meter; nil when nobody can see them: that pairing is
    /// then refused.
    public var showPasskey: (@Sendable (_ digits: UInt32) -> Void)?

    public init(passkey: UInt32?, confirmNumbers: (@Sendable (_ digits: UInt32) async -> Bool)? = nil,
                showPasskey: (@Sendable (_ digits: UInt32) -> Void)? = nil) {
        self.passkey = passkey
        self.confirmNumbers = confirmNumbers
        self.showPasskey = showPasskey
    }
}
