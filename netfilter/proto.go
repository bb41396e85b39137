package netfilter

// IP protocol numbers (IANA).
const (
	ProtoICMP    uint8 = 1
	ProtoIGMP    uint8 = 2
	ProtoTCP     uint8 = 6
	ProtoUDP     uint8 = 17
	ProtoDCCP    uint8 = 33
	ProtoGRE     uint8 = 47
	ProtoESP     uint8 = 50
	ProtoAH      uint8 = 51
	ProtoICMPv6  uint8 = 58
	ProtoSCTP    uint8 = 132
	ProtoMH      uint8 = 135
	ProtoUDPLite uint8 = 136
)

// TCP flag bits as they sit in the TCP header's flags byte.
const (
	TCPFin uint8 = 0x01
	TCPSyn uint8 = 0x02
	TCPRst uint8 = 0x04
	TCPPsh uint8 = 0x08
	TCPAck uint8 = 0x10
	TCPUrg uint8 = 0x20
)
