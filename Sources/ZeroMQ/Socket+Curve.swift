/// Authentication settings for the two sides of a connection. Call before `bind`/`connect`:
/// libzmq reads them when a connection starts.
///
/// A server side names a ZAP domain, and a `ZAPHandler` bound in the same `Context`
/// decides who gets in. Both server helpers also set `zapEnforceDomain`, so a handshake
/// fails when no handler is bound, rather than libzmq's default of letting everyone in.
extension Socket {
    /// Makes this socket the CURVE server of every connection: traffic is encrypted with
    /// `keyPair`, and each client's public key is checked by the `ZAPHandler` for `zapDomain`.
    public func setCurveServer(_ keyPair: CurveKeyPair, zapDomain: String) throws(ZMQError) {
        try set(.curveServer(true))
        try set(.curveSecretKey(keyPair.secretKey))
        try set(.zapDomain(zapDomain))
        try set(.zapEnforceDomain(true))
    }

    /// Makes this socket a CURVE client of the server whose public key is `serverKey`.
    /// The handshake fails unless the server holds the matching secret key, so a client
    /// cannot be talked into sending to an impostor.
    public func setCurveClient(_ keyPair: CurveKeyPair, serverKey: CurvePublicKey) throws(ZMQError) {
        try set(.curveServerKey(serverKey))
        try set(.curvePublicKey(keyPair.publicKey))
        try set(.curveSecretKey(keyPair.secretKey))
    }

    /// Keeps this socket on the NULL mechanism (no encryption, for `ipc://` sockets whose
    /// privacy comes from a private directory) but has every connection checked by the
    /// `ZAPHandler` for `zapDomain`, which gives it that domain's NULL user id.
    ///
    /// Without a ZAP domain, libzmq takes a NULL peer's "User-Id" from the peer itself, so
    /// set one on every socket whose `Message.userID` is trusted.
    public func setZAPDomain(_ zapDomain: String) throws(ZMQError) {
        try set(.zapDomain(zapDomain))
        try set(.zapEnforceDomain(true))
    }
}
