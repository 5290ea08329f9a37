/// What a client or worker needs to reach a broker that requires CURVE: its own key pair
/// and the broker's public key.
public struct CurveClientCredentials: Sendable, Equatable {
    public var keyPair: CurveKeyPair
    public var serverKey: CurvePublicKey

    public init(keyPair: CurveKeyPair, serverKey: CurvePublicKey) {
        self.keyPair = keyPair
        self.serverKey = serverKey
    }

    /// Loads `NAME.key` (which must not be readable by others) and the broker's `.pub`.
    public init(keyFile: String, serverPublicKeyFile: String) throws(KeyFileError) {
        keyPair = try CurveKeyPair(keyFile: keyFile)
        serverKey = try CurvePublicKey(publicKeyFile: serverPublicKeyFile)
    }

    /// Sets this socket up as a CURVE client of the broker. Call before `connect`.
    public func apply(to socket: Socket) throws(ZMQError) {
        try socket.setCurveClient(keyPair, serverKey: serverKey)
    }
}
