package kclient

import (
	"errors"
	"fmt"
)

// ErrAuthentication is wrapped by errors of a client that could not
// authenticate: SASL credentials refused, or a TLS handshake that failed
// (an untrusted certificate, for one). A retry cannot cure it.
var ErrAuthentication = errors.New("kafka: authentication failed")

// ErrAuthorization is wrapped by errors of an operation the cluster's ACLs
// deny; the error names the operation and the resource. A retry cannot
// cure it.
var ErrAuthorization = errors.New("kafka: not authorized")

// IsSecurity reports whether err is an authentication or authorization
// failure: configuration to fix, not an outage to wait out.
func IsSecurity(err error) bool {
	return errors.Is(err, ErrAuthentication) || errors.Is(err, ErrAuthorization)
}

// CredentialsErr is the error of refused SASL credentials. It, TLSErr and
// DeniedErr make every client's security failures read the same.
func CredentialsErr(cause any) error {
	return fmt.Errorf("%w (check sasl.mechanism, sasl.username and sasl.password): %v", ErrAuthentication, cause)
}

// TLSErr is the error of a failed TLS handshake.
func TLSErr(cause any) error {
	return fmt.Errorf("%w: TLS handshake with the broker failed (check ssl.ca.location and the broker's certificate): %v", ErrAuthentication, cause)
}

// DeniedErr is the error of op (as Kafka's ACLs name it) denied.
func DeniedErr(op string, cause any) error {
	return fmt.Errorf("%w: %s is denied (grant the ACLs in the README's Security section): %v", ErrAuthorization, op, cause)
}
