package emulator

import (
	"time"

	"github.com/clusterlab/clusterlab/netfilter"
)

// protoIP is the protocol of fwmark persistence templates (IP protocol numbers and TCP
// flags are netfilter's).
const protoIP uint8 = 0

// SCTP chunk types the connection table reacts to (RFC 9260).
const (
	SCTPData             uint8 = 0
	SCTPInit             uint8 = 1
	SCTPInitAck          uint8 = 2
	SCTPAbort            uint8 = 6
	SCTPShutdown         uint8 = 7
	SCTPShutdownAck      uint8 = 8
	SCTPError            uint8 = 9
	SCTPCookieEcho       uint8 = 10
	SCTPCookieAck        uint8 = 11
	SCTPShutdownComplete uint8 = 14
)

// Directions of the state tables (IP_VS_DIR_*).
const (
	dirInput = iota
	dirOutput
	dirInputOnly
)

// TCP states (IP_VS_TCP_S_*).
const (
	tcpNone = iota
	tcpEstablished
	tcpSynSent
	tcpSynRecv
	tcpFinWait
	tcpTimeWait
	tcpClose
	tcpCloseWait
	tcpLastAck
	tcpListen
	tcpSynAck
	tcpLast
)

var tcpStateNames = [...]string{"NONE", "ESTABLISHED", "SYN_SENT", "SYN_RECV", "FIN_WAIT",
	"TIME_WAIT", "CLOSE", "CLOSE_WAIT", "LAST_ACK", "LISTEN", "SYNACK"}

// defaultTCPTimeouts is tcp_timeouts[] of ip_vs_proto_tcp.c.
var defaultTCPTimeouts = [tcpLast + 1]time.Duration{
	tcpNone:        2 * time.Second,
	tcpEstablished: 15 * time.Minute,
	tcpSynSent:     2 * time.Minute,
	tcpSynRecv:     1 * time.Minute,
	tcpFinWait:     2 * time.Minute,
	tcpTimeWait:    2 * time.Minute,
	tcpClose:       10 * time.Second,
	tcpCloseWait:   60 * time.Second,
	tcpLastAck:     30 * time.Second,
	tcpListen:      2 * time.Minute,
	tcpSynAck:      120 * time.Second,
	tcpLast:        2 * time.Second,
}

// tcpActive is tcp_state_active_table[] since Linux 4.8 (commit be2cef49): the states
// in which a connection counts in ActiveConn.
var tcpActive = [tcpLast]bool{tcpEstablished: true, tcpSynSent: true, tcpSynRecv: true, tcpSynAck: true}

const (
	sNO = tcpNone
	sES = tcpEstablished
	sSS = tcpSynSent
	sSR = tcpSynRecv
	sFW = tcpFinWait
	sTW = tcpTimeWait
	sCL = tcpClose
	sCW = tcpCloseWait
	sLA = tcpLastAck
	sLI = tcpListen
	sSA = tcpSynAck
)

// tcpStates is tcp_states[] (the normal, non-secure_tcp table): [direction*4+flag][state]
// with flag rows syn, fin, ack, rst.
var tcpStates = [12][tcpLast]uint8{
	// INPUT
	{sSR, sES, sES, sSR, sSR, sSR, sSR, sSR, sSR, sSR, sSR}, // syn
	{sCL, sCW, sSS, sTW, sTW, sTW, sCL, sCW, sLA, sLI, sTW}, // fin
	{sES, sES, sSS, sES, sFW, sTW, sCL, sCW, sCL, sLI, sES}, // ack
	{sCL, sCL, sCL, sSR, sCL, sCL, sCL, sCL, sLA, sLI, sSR}, // rst
	// OUTPUT
	{sSS, sES, sSS, sSR, sSS, sSS, sSS, sSS, sSS, sLI, sSR},
	{sTW, sFW, sSS, sTW, sFW, sTW, sCL, sTW, sLA, sLI, sTW},
	{sES, sES, sSS, sES, sFW, sTW, sCL, sCW, sLA, sES, sES},
	{sCL, sCL, sSS, sCL, sCL, sTW, sCL, sCL, sCL, sCL, sCL},
	// INPUT-ONLY
	{sSR, sES, sES, sSR, sSR, sSR, sSR, sSR, sSR, sSR, sSR},
	{sCL, sFW, sSS, sTW, sFW, sTW, sCL, sCW, sLA, sLI, sTW},
	{sES, sES, sSS, sES, sFW, sTW, sCL, sCW, sCL, sLI, sES},
	{sCL, sCL, sCL, sSR, sCL, sCL, sCL, sCL, sLA, sLI, sCL},
}

// tcpStateIdx is tcp_state_idx(): RST beats SYN beats FIN beats ACK; -1 for none.
func tcpStateIdx(flags uint8) int {
	switch {
	case flags&netfilter.TCPRst != 0:
		return 3
	case flags&netfilter.TCPSyn != 0:
		return 0
	case flags&netfilter.TCPFin != 0:
		return 1
	case flags&netfilter.TCPAck != 0:
		return 2
	}
	return -1
}

// UDP has one state.
const udpNormal = 0

const defaultUDPTimeout = 5 * time.Minute

// SCTP states (IP_VS_SCTP_S_*).
const (
	sctpNone = iota
	sctpInit1
	sctpInit
	sctpCookieSent
	sctpCookieReplied
	sctpCookieWait
	sctpCookie
	sctpCookieEchoed
	sctpEstablished
	sctpShutdownSent
	sctpShutdownReceived
	sctpShutdownAckSent
	sctpRejected
	sctpClosed
	sctpLast
)

var sctpStateNames = [...]string{"NONE", "INIT1", "INIT", "C-SENT", "C-REPLIED", "C-WAIT",
	"COOKIE", "C-ECHOED", "ESTABLISHED", "S-SENT", "S-RECEIVED", "S-ACK-SENT", "REJECTED", "CLOSED"}

const sctpMaxRTO = 61 * time.Second

var defaultSCTPTimeouts = [sctpLast + 1]time.Duration{
	sctpNone:             2 * time.Second,
	sctpInit1:            4 * time.Second,
	sctpInit:             sctpMaxRTO,
	sctpCookieSent:       sctpMaxRTO,
	sctpCookieReplied:    sctpMaxRTO,
	sctpCookieWait:       sctpMaxRTO,
	sctpCookie:           sctpMaxRTO,
	sctpCookieEchoed:     sctpMaxRTO,
	sctpEstablished:      15 * time.Minute,
	sctpShutdownSent:     sctpMaxRTO,
	sctpShutdownReceived: sctpMaxRTO,
	sctpShutdownAckSent:  sctpMaxRTO,
	sctpRejected:         4 * time.Second,
	sctpClosed:           sctpMaxRTO,
	sctpLast:             2 * time.Second,
}

// SCTP events (enum ipvs_sctp_event_t).
const (
	sctpEvData = iota
	sctpEvInit
	sctpEvInitAck
	sctpEvCookieEcho
	sctpEvCookieAck
	sctpEvShutdown
	sctpEvShutdownAck
	sctpEvShutdownComplete
	sctpEvError
	sctpEvAbort
)

// sctpEvents maps chunk types 0..14 to events; larger types count as DATA.
var sctpEvents = [15]uint8{
	SCTPData: sctpEvData, SCTPInit: sctpEvInit, SCTPInitAck: sctpEvInitAck, 3: sctpEvData,
	4: sctpEvData, 5: sctpEvData, SCTPAbort: sctpEvAbort, SCTPShutdown: sctpEvShutdown,
	SCTPShutdownAck: sctpEvShutdownAck, SCTPError: sctpEvError, SCTPCookieEcho: sctpEvCookieEcho,
	SCTPCookieAck: sctpEvCookieAck, 12: sctpEvData, 13: sctpEvData,
	SCTPShutdownComplete: sctpEvShutdownComplete,
}

const (
	xNO = sctpNone
	xI1 = sctpInit1
	xIN = sctpInit
	xCS = sctpCookieSent
	xCR = sctpCookieReplied
	xCW = sctpCookieWait
	xCO = sctpCookie
	xCE = sctpCookieEchoed
	xES = sctpEstablished
	xSS = sctpShutdownSent
	xSR = sctpShutdownReceived
	xSA = sctpShutdownAckSent
	xRJ = sctpRejected
	xCL = sctpClosed
)

// sctpStates is sctp_states[direction][event][state] of ip_vs_proto_sctp.c.
var sctpStates = [3][10][sctpLast]uint8{
	{ // INPUT
		{xES, xI1, xIN, xCS, xCR, xCW, xCO, xCE, xES, xSS, xSR, xSA, xRJ, xCL},
		{xI1, xIN, xIN, xCS, xCR, xCW, xCO, xCE, xES, xSS, xSR, xSA, xIN, xIN},
		{xCW, xCW, xCW, xCS, xCR, xCO, xCO, xCE, xES, xSS, xSR, xSA, xRJ, xCL},
		{xCR, xIN, xIN, xCR, xCR, xCW, xCO, xCE, xES, xSS, xSR, xSA, xRJ, xCL},
		{xES, xI1, xIN, xCS, xCR, xCW, xCO, xES, xES, xSS, xSR, xSA, xRJ, xCL},
		{xSR, xI1, xIN, xCS, xCR, xCW, xCO, xCE, xSR, xSS, xSR, xSA, xRJ, xCL},
		{xCL, xIN, xIN, xCS, xCR, xCW, xCO, xCE, xES, xCL, xSR, xCL, xRJ, xCL},
		{xCL, xCL, xCL, xCS, xCR, xCW, xCO, xCE, xES, xSS, xSR, xCL, xRJ, xCL},
		{xCL, xI1, xIN, xCS, xCR, xCW, xCO, xCL, xES, xSS, xSR, xSA, xRJ, xCL},
		{xCL, xCL, xCL, xCL, xCL, xRJ, xCL, xCL, xCL, xCL, xCL, xCL, xCL, xCL},
	},
	{ // OUTPUT
		{xES, xI1, xIN, xCS, xCR, xCW, xCO, xCE, xES, xSS, xSR, xSA, xRJ, xCL},
		{xCW, xCW, xCW, xCW, xCW, xCW, xCW, xCW, xES, xCW, xCW, xCW, xCW, xCW},
		{xCS, xCS, xCS, xCS, xCR, xCW, xCO, xCE, xES, xSS, xSR, xSA, xRJ, xCL},
		{xCE, xCE, xCE, xCE, xCE, xCE, xCE, xCE, xES, xSS, xSR, xSA, xRJ, xCL},
		{xES, xES, xES, xES, xES, xES, xES, xES, xES, xSS, xSR, xSA, xRJ, xCL},
		{xSS, xSS, xSS, xSS, xSS, xSS, xSS, xSS, xSS, xSS, xSR, xSA, xRJ, xCL},
		{xSA, xSA, xSA, xSA, xSA, xCW, xCO, xCE, xES, xSA, xSA, xSA, xRJ, xCL},
		{xCL, xI1, xIN, xCS, xCR, xCW, xCO, xCE, xES, xSS, xSR, xSA, xRJ, xCL},
		{xCL, xCL, xCL, xCL, xCL, xCW, xCO, xCE, xES, xSS, xSR, xSA, xRJ, xCL},
		{xCL, xRJ, xCL, xCL, xCL, xCL, xCL, xCL, xCL, xCL, xCL, xCL, xCL, xCL},
	},
	{ // INPUT-ONLY
		{xES, xI1, xIN, xCS, xCR, xES, xCO, xCE, xES, xSS, xSR, xSA, xRJ, xCL},
		{xI1, xIN, xIN, xIN, xIN, xIN, xCO, xCE, xES, xSS, xSR, xSA, xIN, xIN},
		{xCE, xCE, xCE, xCE, xCE, xCE, xCO, xCE, xES, xSS, xSR, xSA, xRJ, xCL},
		{xES, xES, xES, xES, xES, xES, xCO, xCE, xES, xSS, xSR, xSA, xRJ, xCL},
		{xES, xI1, xIN, xES, xES, xCW, xES, xES, xES, xSS, xSR, xSA, xRJ, xCL},
		{xSR, xI1, xIN, xCS, xCR, xCW, xCO, xCE, xSR, xSS, xSR, xSA, xRJ, xCL},
		{xCL, xIN, xIN, xCS, xCR, xCW, xCO, xCE, xCL, xCL, xSR, xCL, xRJ, xCL},
		{xCL, xCL, xCL, xCL, xCL, xCW, xCO, xCE, xES, xSS, xCL, xCL, xRJ, xCL},
		{xCL, xI1, xIN, xCS, xCR, xCW, xCO, xCE, xES, xSS, xSR, xSA, xRJ, xCL},
		{xCL, xCL, xCL, xCL, xCL, xRJ, xCL, xCL, xCL, xCL, xCL, xCL, xCL, xCL},
	},
}

func sctpEvent(chunk uint8) int {
	if int(chunk) < len(sctpEvents) {
		return int(sctpEvents[chunk])
	}
	return sctpEvData
}

// protoName is ip_vs_proto_name().
func protoName(p uint8) string {
	switch p {
	case protoIP:
		return "IP"
	case netfilter.ProtoTCP:
		return "TCP"
	case netfilter.ProtoUDP:
		return "UDP"
	case netfilter.ProtoSCTP:
		return "SCTP"
	}
	return "IP_" + itoa(int(p))
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	neg := i < 0
	if neg {
		i = -i
	}
	var b [20]byte
	n := len(b)
	for i > 0 {
		n--
		b[n] = byte('0' + i%10)
		i /= 10
	}
	if neg {
		n--
		b[n] = '-'
	}
	return string(b[n:])
}
