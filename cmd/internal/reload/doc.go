// Package reload puts in effect, while itlproxy serves, the files it reads
// at start that may change under it: the SLO file, whose new objectives
// judge the streams that start after it, and the certificate files of the
// proxy listener and of an https upstream (CertFile), which every new
// handshake then takes. A file that cannot be used is refused, logged and
// counted once, and what is in use stays.
package reload
