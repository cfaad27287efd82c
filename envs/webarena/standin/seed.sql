-- The stand-in shop's database (MariaDB): a few products, no orders yet.
CREATE DATABASE IF NOT EXISTS shop;
CREATE USER IF NOT EXISTS 'shop'@'localhost' IDENTIFIED BY 'shop';
CREATE USER IF NOT EXISTS 'shop'@'127.0.0.1' IDENTIFIED BY 'shop';
GRANT ALL ON shop.* TO 'shop'@'localhost';
GRANT ALL ON shop.* TO 'shop'@'127.0.0.1';
USE shop;
CREATE TABLE products (id INT PRIMARY KEY, name VARCHAR(80) NOT NULL, price DECIMAL(8,2) NOT NULL);
CREATE TABLE orders (id INT AUTO_INCREMENT PRIMARY KEY, product_id INT NOT NULL, qty INT NOT NULL,
                     FOREIGN KEY (product_id) REFERENCES products(id));
INSERT INTO products VALUES (1, 'Espresso machine', 249.00), (2, 'Burr grinder', 89.50),
                            (3, 'Milk jug', 12.99), (4, 'Tamper', 19.90);
