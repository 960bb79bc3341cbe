/// When a meter refusing the stored key counts as a lost bond (`re-pair needed`) for the daemon.
///
/// One session's refusals (three in some 2 s) are no verdict: links from a scan address the meter does
/// not know (an adapter with no public address connecting while it scans) gave exactly that. A session
/// counts as refused when the meter refused the key in any of its attempts, also when the session then
/// failed otherwise (a meter advertising in bursts refuses one attempt and lets the next run into its
/// pause: a failed connect is no working connection). The first refusal starts a count; a refusal in a
/// later session at least `period` after it, with no working connection between, confirms the loss. Short enough that a meter that did lose its bond is reported
/// within the few sessions one press of its button gives.
struct BondLossConfirmation {
    static let period: Duration = .seconds(10)

    private var firstRefusal: [String: ContinuousClock.Instant] = [:]

    /// A session found the key refused at `now`; true when that confirms a lost bond.
    mutating func refused(_ address: String, at now: ContinuousClock.Instant) -> Bool {
        guard let first = firstRefusal[address] else {
            firstRefusal[address] = now
            return false
        }
        guard first.duration(to: now) >= Self.period else { return false }
        firstRefusal[address] = nil
        return true
    }

    /// What re-pair needed says when the sessions that confirmed it ended otherwise than refused.
    static func message(_ address: String) -> String {
        "\(address) refused the encryption with this gateway's key in connections at least \(period.components.seconds) s apart, with no working connection between: the meter no longer has the bond (reset, or paired with another device)"
    }

    /// The key worked: an earlier refusal was no lost bond.
    mutating func worked(_ address: String) {
        firstRefusal[address] = nil
    }
}
