// Command tcpecho is the origin stand-in inside the FROM scratch image of
// the Docker firewall test: a TCP echo server, and a client for the
// container's own outbound connections.
//
//	tcpecho serve PORT
//	tcpecho dial HOST:PORT   # exit 0 when a line comes back within 2 s
package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"time"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: tcpecho serve PORT | tcpecho dial HOST:PORT")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "serve":
		ln, err := net.Listen("tcp", ":"+os.Args[2])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		for {
			c, err := ln.Accept()
			if err != nil {
				continue
			}
			go func() {
				io.Copy(c, c)
				c.Close()
			}()
		}
	case "dial":
		c, err := net.DialTimeout("tcp", os.Args[2], 2*time.Second)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		c.SetDeadline(time.Now().Add(2 * time.Second))
		msg := []byte("edgefleet\n")
		buf := make([]byte, len(msg))
		if _, err := c.Write(msg); err == nil {
			_, err = io.ReadFull(c, buf)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	default:
		os.Exit(2)
	}
}
