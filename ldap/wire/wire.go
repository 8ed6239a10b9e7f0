// Package wire frames and shallowly parses LDAPv3 messages (RFC 4511) for the
// routing core: it reads whole PDUs from a stream without decoding them,
// extracts only what routing needs, and builds the few PDUs the core sends
// itself. Forwarded PDUs are never re-encoded: Message.Raw is the bytes as
// they arrived.
//
//	r := wire.NewReader(conn)
//	r.SetMax(256 << 10)
//	raw, err := r.Next()         // one LDAPMessage, not decoded
//	m, err := wire.Parse(raw)    // ID, Op, bind name, search base, ...
//	id, op, ok := wire.Peek(raw) // the id and operation only: the hot path
//	p, ok := wire.FindPaged(raw) // a paged-results control (RFC 2696)
//	conn.Write(wire.Result(m.ID, wire.ResponseTag(m.Op), wire.ResultUnavailable, "", "no server"))
//
// Only definite lengths are accepted (RFC 4511 §5.1); long-form and
// non-minimal lengths are. Every malformed input yields a *ProtocolError,
// never a panic, and no allocation is larger than a declared length that was
// first checked against the size cap.
package wire

import "strconv"

// BER identifier bytes of protocolOp (application class).
const (
	TagBindRequest           = 0x60
	TagBindResponse          = 0x61
	TagUnbindRequest         = 0x42
	TagSearchRequest         = 0x63
	TagSearchResultEntry     = 0x64
	TagSearchResultDone      = 0x65
	TagSearchResultReference = 0x73
	TagModifyRequest         = 0x66
	TagModifyResponse        = 0x67
	TagAddRequest            = 0x68
	TagAddResponse           = 0x69
	TagDelRequest            = 0x4a
	TagDelResponse           = 0x6b
	TagModDNRequest          = 0x6c
	TagModDNResponse         = 0x6d
	TagCompareRequest        = 0x6e
	TagCompareResponse       = 0x6f
	TagAbandonRequest        = 0x50
	TagExtendedRequest       = 0x77
	TagExtendedResponse      = 0x78
	TagIntermediateResponse  = 0x79
)

// Extended operation OIDs the core knows by name.
const (
	OIDStartTLS              = "1.3.6.1.4.1.1466.20037"
	OIDWhoAmI                = "1.3.6.1.4.1.4203.1.11.3"
	OIDNoticeOfDisconnection = "1.3.6.1.4.1.1466.20036"
)

// LDAP result codes the core produces itself (RFC 4511 §4.1.9).
const (
	ResultSuccess                = 0
	ResultOperationsError        = 1
	ResultProtocolError          = 2
	ResultAuthMethodNotSupported = 7
	ResultSaslBindInProgress     = 14
	ResultInvalidCredentials     = 49
	ResultBusy                   = 51
	ResultUnavailable            = 52
	ResultUnwillingToPerform     = 53
	ResultOther                  = 80
)

// OpName is the operation name used in logs, metrics and the DLP condition
// opr.req.typ for a request tag; "" for a tag that is not a request.
func OpName(tag byte) string {
	switch tag {
	case TagBindRequest:
		return "bind"
	case TagUnbindRequest:
		return "unbind"
	case TagSearchRequest:
		return "search"
	case TagCompareRequest:
		return "compare"
	case TagAddRequest:
		return "add"
	case TagModifyRequest:
		return "modify"
	case TagDelRequest:
		return "delete"
	case TagModDNRequest:
		return "modrdn"
	case TagExtendedRequest:
		return "extended"
	case TagAbandonRequest:
		return "abandon"
	}
	return ""
}

// ResponseTag is the tag of the final response to a request; 0 for unbind,
// abandon and tags that are not requests.
func ResponseTag(reqTag byte) byte {
	switch reqTag {
	case TagBindRequest:
		return TagBindResponse
	case TagSearchRequest:
		return TagSearchResultDone
	case TagModifyRequest:
		return TagModifyResponse
	case TagAddRequest:
		return TagAddResponse
	case TagDelRequest:
		return TagDelResponse
	case TagModDNRequest:
		return TagModDNResponse
	case TagCompareRequest:
		return TagCompareResponse
	case TagExtendedRequest:
		return TagExtendedResponse
	}
	return 0
}

// IsFinal reports whether a response with this tag ends its operation:
// false for search entries, references and intermediate responses, which
// are followed by more PDUs with the same message id.
func IsFinal(respTag byte) bool {
	switch respTag {
	case TagSearchResultEntry, TagSearchResultReference, TagIntermediateResponse:
		return false
	}
	return true
}

// IsRead reports whether a request can be replayed on another server after
// a failure without changing the directory: bind, search, compare and the
// WhoAmI extended operation. Everything else (add, modify, delete, modrdn,
// other extended operations) is a write whose outcome is unknown once sent.
func IsRead(m *Message) bool {
	switch m.Op {
	case TagBindRequest, TagSearchRequest, TagCompareRequest:
		return true
	case TagExtendedRequest:
		return m.ExtOID == OIDWhoAmI
	}
	return false
}

var resultNames = map[int]string{
	0: "success", 1: "operationsError", 2: "protocolError", 3: "timeLimitExceeded",
	4: "sizeLimitExceeded", 5: "compareFalse", 6: "compareTrue", 7: "authMethodNotSupported",
	8: "strongerAuthRequired", 10: "referral", 11: "adminLimitExceeded",
	12: "unavailableCriticalExtension", 13: "confidentialityRequired", 14: "saslBindInProgress",
	16: "noSuchAttribute", 17: "undefinedAttributeType", 18: "inappropriateMatching",
	19: "constraintViolation", 20: "attributeOrValueExists", 21: "invalidAttributeSyntax",
	32: "noSuchObject", 33: "aliasProblem", 34: "invalidDNSyntax", 36: "aliasDereferencingProblem",
	48: "inappropriateAuthentication", 49: "invalidCredentials", 50: "insufficientAccessRights",
	51: "busy", 52: "unavailable", 53: "unwillingToPerform", 54: "loopDetect",
	64: "namingViolation", 65: "objectClassViolation", 66: "notAllowedOnNonLeaf",
	67: "notAllowedOnRDN", 68: "entryAlreadyExists", 69: "objectClassModsProhibited",
	71: "affectsMultipleDSAs", 80: "other",
	// The VLV control (draft-ietf-ldapext-ldapv3-vlv; slapd and Active
	// Directory send it).
	76: "virtualListViewError",
	// RFC 3928 (LCUP), RFC 3909 (cancel), RFC 4528 (assertion), RFC 4370
	// (proxied authorization), RFC 4533 (content synchronization),
	// draft-zeilenga-ldap-noop (slapd's no-op control).
	113: "lcupResourcesExhausted", 114: "lcupSecurityViolation", 115: "lcupInvalidData",
	116: "lcupUnsupportedScheme", 117: "lcupReloadRequired",
	118: "canceled", 119: "noSuchOperation", 120: "tooLate", 121: "cannotCancel",
	122: "assertionFailed", 123: "authorizationDenied",
	4096: "e-syncRefreshRequired", 16654: "noOperation",
}

// ResultName is the name of a result code as its RFC spells it
// ("success", "invalidCredentials", "unavailable", "e-syncRefreshRequired"):
// every code of RFC 4511 and of the IANA registry's extensions, and the
// ones slapd and Active Directory send. A code no document names is
// "code-<n>", so that it still reads as a number in logs and metrics.
func ResultName(code int) string {
	if n, ok := resultNames[code]; ok {
		return n
	}
	return "code-" + strconv.Itoa(code)
}
