Content-Length: 99999999999999999999

{}Content-Length: 18446744073709551615
Content-Length: 2

{}content-length:3

[1]Content-Length: 70000000

{"jsonrpc":"2.0","id":1,"method":"x"}
Content-Length: 5

{"a"