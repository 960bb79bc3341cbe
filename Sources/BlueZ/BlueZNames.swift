/// D-Bus names of BlueZ's API (bluez `doc/org.bluez.*.rst`).
public enum BlueZNames {
    public static let service = "org.bluez"
    public static let root = "/org/bluez"
    public static let adapter = "org.bluez.Adapter1"
    public static let device = "org.bluez.Device1"
    public static let gattService = "org.bluez.GattService1"
    public static let gattCharacteristic = "org.bluez.GattCharacteristic1"
    public static let gattDescriptor = "org.bluez.GattDescriptor1"
    public static let gattManager = "org.bluez.GattManager1"
    public static let gattProfile = "org.bluez.GattProfile1"
    public static let agentManager = "org.bluez.AgentManager1"
    public static let agent = "org.bluez.Agent1"
}

/// `org.bluez.Error.*` names the client reacts to.
public enum BlueZErrorNames {
    public static let failed = "org.bluez.Error.Failed"
    public static let inProgress = "org.bluez.Error.InProgress"
    public static let notReady = "org.bluez.Error.NotReady"
    public static let notConnected = "org.bluez.Error.NotConnected"
    public static let alreadyConnected = "org.bluez.Error.AlreadyConnected"
    public static let alreadyExists = "org.bluez.Error.AlreadyExists"
    public static let doesNotExist = "org.bluez.Error.DoesNotExist"
    public static let notPermitted = "org.bluez.Error.NotPermitted"
    public static let notAuthorized = "org.bluez.Error.NotAuthorized"
    public static let notSupported = "org.bluez.Error.NotSupported"
    public static let notAvailable = "org.bluez.Error.NotAvailable"
    public static let invalidArguments = "org.bluez.Error.InvalidArguments"
    public static let authenticationFailed = "org.bluez.Error.AuthenticationFailed"
    public static let authenticationCanceled = "org.bluez.Error.AuthenticationCanceled"
    public static let authenticationRejected = "org.bluez.Error.AuthenticationRejected"
    public static let authenticationTimeout = "org.bluez.Error.AuthenticationTimeout"
    public static let connectionAttemptFailed = "org.bluez.Error.ConnectionAttemptFailed"
    public static let rejected = "org.bluez.Error.Rejected"
    public static let canceled = "org.bluez.Error.Canceled"
}
