/// The gateway's version, as in the VERSION file of the source tree (a system test compares the two),
/// for what the gateway writes about itself: a capture's header.
public enum GatewayVersion {
    public static let text = "0.1.0"
}
