mod plain_http;
mod secret_ports;
