//! [`Secret<T>`]: where key material lives.
//!
//! The value is boxed (a move copies a pointer, not the key), zeroized when dropped, and the
//! type implements none of `Debug`, `Display`, `Clone` or `Serialize`, so a key cannot reach a
//! log line or a config dump by accident. Read it with [`Secret::expose`] for the shortest
//! possible scope.

use zeroize::Zeroize;

/// A zeroize-on-drop container with no formatting or serialisation.
pub struct Secret<T: Zeroize>(Box<T>);

/// A 32-byte symmetric key.
pub type Key32 = Secret<[u8; 32]>;

impl<T: Zeroize> Secret<T> {
    /// Takes ownership of `value` (the caller should not keep other copies).
    pub fn new(value: T) -> Self {
        Secret(Box::new(value))
    }

    /// Borrows the secret value.
    pub fn expose(&self) -> &T {
        &self.0
    }
}

impl Secret<[u8; 32]> {
    /// A fresh random key from the OS CSPRNG.
    pub fn random() -> Self {
        let mut s = Secret::new([0u8; 32]);
        super::random_bytes(s.0.as_mut());
        s
    }

    /// Builds a key by letting `fill` write straight into the zeroizing box.
    pub fn from_fn(fill: impl FnOnce(&mut [u8; 32])) -> Self {
        let mut s = Secret::new([0u8; 32]);
        fill(&mut s.0);
        s
    }
}

impl<T: Zeroize> Drop for Secret<T> {
    fn drop(&mut self) {
        self.0.zeroize();
    }
}
