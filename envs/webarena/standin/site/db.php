<?php
// One connection per request, over loopback TCP to the MariaDB of the same image.
function db(): mysqli {
    mysqli_report(MYSQLI_REPORT_ERROR | MYSQLI_REPORT_STRICT);
    return new mysqli('127.0.0.1', 'shop', 'shop', 'shop', 3306);
}
function page(string $title, string $body): void {
    header('Content-Type: text/html; charset=utf-8');
    echo "<!doctype html><html><head><title>" . htmlspecialchars($title) . "</title></head><body>"
       . "<nav><a href=\"/\">Products</a> | <a href=\"/orders.php\">My orders</a></nav>"
       . "<h1>" . htmlspecialchars($title) . "</h1>$body</body></html>";
}
