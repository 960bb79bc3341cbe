import GatewayCore

/// What a failed `Device1.Pair` means for the person pairing.
///
/// BlueZ turns the kernel's pairing status into an error name (`src/device.c` new_authentication_return:
/// rejected or busy → `AuthenticationRejected`, timeout → `AuthenticationTimeout`, cancelled, no resources
/// or disconnected → `AuthenticationCanceled`, connect failed → `ConnectionAttemptFailed`, anything else
/// → `AuthenticationFailed`). Only a refusal that comes right after the gateway's agent gave the passkey
/// is a wrong PIN: the meter checks the passkey at once (the SMP Confirm/Random exchange takes well
/// under a second), while a pairing that stalls ends after SMP's 30 s timeout (Core Vol 3 Part H 3.4),
/// as seen with EATT on when a right-PIN pairing followed a wrong one (`command 0x0406 tx timeout`, 34 s).
/// The same holds for numeric comparison: a refusal right after the digits were confirmed here is the
/// meter's No. What the gateway's own agent refused (no PIN, nobody to compare digits) is known from the
/// agent, whatever error name bluetoothd made of it.
public enum PairingFailure: Sendable, Equatable {
    /// The meter checked the passkey and refused it.
    case wrongPasskey
    /// The meter refused to pair before any passkey was asked for (not in pairing mode, say).
    case refused
    /// Nothing came back in time: a timeout, a link that dropped or was never made, a cancelled bonding.
    case noAnswer
    /// The adapter is off or not ready.
    case adapterNotReady
    /// Another pairing with this meter is running.
    case busy
    /// The meter asked for the passkey it shows and none was given (no `--pin`).
    case passkeyNeeded
    /// The method needs a person (numeric comparison, or digits to type on the meter) and none can be asked.
    case personNeeded
    /// The person said the meter shows other digits (numeric comparison).
    case numbersDiffer
    /// The meter refused right after the digits were confirmed here (No pressed on the meter).
    case rejectedOnMeter
    /// Anything else; BlueZ's error is kept for the message.
    case other

    /// A refusal later than this after the passkey was given is taken for a stall, not a wrong passkey.
    public static let passkeyCheckWindow: Duration = .seconds(15)

    /// What the agent refused on its own side, whatever bluetoothd made of it; nil for the answers given.
    static func unanswerable(_ step: PairingAgent.Step) -> PairingFailure? {
        switch step {
        case .passkeyMissing: .passkeyNeeded
        case .numbersUnasked, .passkeyNotShown: .personNeeded
        case .numbersDiffer: .numbersDiffer
        case .passkeyGiven, .numbersConfirmed, .passkeyShown, .authorized: nil
        }
    }

    /// The method a pairing that succeeded used, from the agent's last step.
    static func method(after step: PairingAgent.Step?) -> PairingMethod {
        switch step {
        case .passkeyGiven?: .passkeyEntry
        case .numbersConfirmed?: .numericComparison
        case .passkeyShown?: .passkeyShown
        case .authorized?, nil, .passkeyMissing?, .numbersUnasked?, .numbersDiffer?, .passkeyNotShown?: .justWorks
        }
    }

    /// Classifies a `Pair` error from its name and the agent's last step for this pairing.
    public static func classify(name: String?, kind: BlueZError.Kind, lastStep: (step: PairingAgent.Step, ago: Duration)?) -> PairingFailure {
        if let lastStep, let refused = unanswerable(lastStep.step) { return refused }
        if lastStep?.step == .numbersConfirmed, let ago = lastStep?.ago,
           name == BlueZErrorNames.authenticationFailed || name == BlueZErrorNames.authenticationRejected {
            return ago < passkeyCheckWindow ? .rejectedOnMeter : .noAnswer
        }
        let passkeyAgo = lastStep.flatMap { $0.step == .passkeyGiven ? $0.ago : nil }
        return classify(name: name, kind: kind, passkeyAnsweredAgo: passkeyAgo)
    }

    /// Classifies a `Pair` error. `passkeyAnsweredAgo`: how long before the error the agent gave the
    /// passkey for this pairing, nil when it was never asked.
    public static func classify(name: String?, kind: BlueZError.Kind, passkeyAnsweredAgo: Duration?) -> PairingFailure {
        switch name {
        case BlueZErrorNames.authenticationFailed?, BlueZErrorNames.authenticationRejected?:
            guard let ago = passkeyAnsweredAgo else { return .refused }
            return ago < passkeyCheckWindow ? .wrongPasskey : .noAnswer
        case BlueZErrorNames.authenticationTimeout?, BlueZErrorNames.authenticationCanceled?,
             BlueZErrorNames.connectionAttemptFailed?:
            return .noAnswer
        case BlueZErrorNames.notReady?:
            return .adapterNotReady
        case BlueZErrorNames.inProgress?:
            return .busy
        default:
            break
        }
        switch kind {
        case .timeout, .transient, .disconnected: return .noAnswer
        default: return .other
        }
    }
}
