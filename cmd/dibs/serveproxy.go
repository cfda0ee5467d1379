package main

import "strconv"

// The services proxy's column of `dibs services`: shown only when some
// service has a proxy port (the proxy is off by default), so the table of
// a cluster without it is unchanged.

func proxyHeader(proxied bool) string {
	if !proxied {
		return ""
	}
	return "\tPROXY"
}

// proxyCell is r's proxy port as ":30001" (any node's), "-" without one.
func proxyCell(proxied bool, r serviceRow) string {
	switch {
	case !proxied:
		return ""
	case r.ProxyPort == 0:
		return "\t-"
	}
	return "\t:" + strconv.Itoa(r.ProxyPort)
}
